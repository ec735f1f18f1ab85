package evidence

import (
	"regexp"
	"strings"
	"unicode/utf8"
)

// Redacted replaces a secret in evidence and in extractive summaries.
const Redacted = "[redacted]"

// A rule replaces the secret part of its matches: the whole match, or only its
// submatch named "s" (the value after a key, a header, a flag or a URL's user).
type rule struct {
	re *regexp.Regexp
	// anchors and lineLocal are its pattern's (see pattern).
	anchors   [][]string
	lineLocal bool
	// secret, when set, must accept a match (whole, and its secret part) for the
	// secret part to be replaced.
	secret func(match, value string) bool
}

// secretKey is a key name whose value is a secret: api_key, API-KEY, apikey, token,
// GITHUB_TOKEN, access_token, client_secret, DB_PASSWORD, passwd, pwd, private_key,
// signature, credentials... A name that only contains one of these words (monkey,
// token_count, max_tokens, task-id) is not one.
const secretKey = `(?:[A-Za-z0-9]+[_.-])*(?:api[_-]?key|apikey|access[_-]?key|secret[_-]?key|private[_-]?key|auth[_-]?token|access[_-]?token|refresh[_-]?token|id[_-]?token|session[_-]?token|token|secret|client[_-]?secret|password|pgpassword|passwd|passphrase|pwd|credentials?|signature|sig|x-amz-signature|x-amz-credential|x-amz-security-token|key)`

// value is what follows a secret key: up to a blank, a quote, a separator or a
// bracket. Values that name a secret instead of holding it ($VAR, ${VAR}, <token>) are
// kept by keep.
const value = `[^\s"'&;,<>()\[\]{}\\` + "`" + `]+`

// annotation is a type written between a name and its "=": ": str", ": Optional[str]",
// ": str | None" (Python, TypeScript), " string" (a Go var).
const annotation = `(?:[ \t]*:[ \t]*[A-Za-z_][\w.\[\]|, ]*?|[ \t]+(?:string|\[\]byte))?`

// doubleQuoted is a double-quoted value to its closing quote on the same line; an
// escaped quote (\") inside does not end it.
const doubleQuoted = `"(?P<s>(?:[^"\\\n]|\\.)*)"`

// quoted is a secret value as written after a key or a flag: a quoted one whole, to its
// closing quote on the same line (a blank inside does not end it), else the unquoted
// word; a quote left open is skipped and the word after it taken.
func quoted(word string) string {
	return `(?:` + doubleQuoted + `|'(?P<s>[^'\n]*)'|["']?(?P<s>` + word + `))`
}

// arg is one argument of a command: a quoted one whole, or a word.
var arg = quoted(`[^\s"';&|<>]+`)

// secretWords are what every secretKey holds, in any case; secretEnds, what every
// secretKey ends with.
var (
	secretWords = []string{"key", "token", "secret", "pass", "pwd", "credential", "sig"}
	secretEnds  = []string{"key", "token", "secret", "password", "passwd", "passphrase", "pwd", "credential", "credentials", "signature", "sig"}
)

// followed returns every word followed by every one of next.
func followed(words []string, next ...string) []string {
	var out []string
	for _, w := range words {
		for _, n := range next {
			out = append(out, w+n)
		}
	}
	return out
}

// The rules, each with its anchors (and whether it is line-local): written beside the
// expression they are derived from, and checked against it by TestPatternAnchors and
// TestPatternLineLocal.
var rules = []rule{
	// PEM private key blocks, whole; one without its end line runs to the end of the text.
	{re: regexp.MustCompile(`-----BEGIN [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----(?s:.*?)(?:-----END [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----|\z)`),
		anchors: [][]string{{"-----BEGIN "}, {"PRIVATE KEY"}}},
	// A URL's user-info with a password (https://user:pass@host), or a token as the user.
	{re: regexp.MustCompile(`(?i)\b[a-z][a-z0-9+.-]*://(?:[^\s:@/?#'"]*:(?P<s>[^\s@/?#'"]+)|(?P<s>[A-Za-z0-9_-]{20,}))@`),
		anchors: [][]string{{"://"}, {"@"}}, lineLocal: true},
	// Authorization and its kin as headers: the scheme is kept, the credentials go.
	{re: regexp.MustCompile(`(?i)\b(?:proxy-)?authorization["']?\s*[:=]\s*["']?(?:(?:bearer|basic|token|digest|bot|apikey)\s+)?(?P<s>` + value + `)`),
		anchors: [][]string{{"authorization"}}},
	{re: regexp.MustCompile(`(?i)\b(?:x-api-key|api-key|x-auth-token|x-access-token|private-token|x-goog-api-key)["']?\s*:\s*["']?(?P<s>` + value + `)`),
		anchors: [][]string{{"api-key", "-auth-token", "-access-token", "private-token"}, {":"}}},
	{re: regexp.MustCompile(`(?i)\b(?:set-)?cookie["']?\s*:\s*["']?(?P<s>[^\s"';=]+=[^\s"';]+)`),
		anchors: [][]string{{"cookie"}, {":"}, {"="}}},
	{re: regexp.MustCompile(`(?i)\bbearer\s+(?P<s>[A-Za-z0-9._~+/=-]{8,})`), anchors: [][]string{{"bearer"}}, secret: tokenLike},
	// key=value pairs: query strings, env assignments (export API_KEY=...), options.
	{re: regexp.MustCompile(`(?i)(?:^|[^A-Za-z0-9_.-])` + secretKey + `=` + quoted(value) + `\(?`),
		anchors: [][]string{followed(secretEnds, "=")}, lineLocal: true, secret: assigned},
	// key = value with blanks around "=" (or :=), in code and config files: api_key =
	// "...", const apiKey = '...', os.environ["DB_PASSWORD"] = "...", $env:TOKEN = "...",
	// with a type between (password: str = "...", var password string = "...").
	// Not a comparison (==), a call, a name in code or a plain name (spacedValue).
	{re: regexp.MustCompile(`(?i)(?:^|[^A-Za-z0-9_.-])` + secretKey + annotation + `(?:["']\][ \t]*=|[ \t]+:?=|:=|=[ \t])[ \t]*(?:` +
		doubleQuoted + `|'(?P<s>[^'\n]*)'|(?P<s>[^\s"'&;,<>()\[\]{}\\` + "`" + `=~!][^\s"'&;,<>()\[\]{}\\` + "`" + `]*))\(?`),
		anchors:   [][]string{secretWords, {"]", " =", "\t=", ":=", "= ", "=\t"}, followed(secretEnds, `"`, "'", " ", "\t", ":", "=")},
		lineLocal: true, secret: spacedValue},
	// SQL that sets a password: ALTER USER x WITH PASSWORD '...', CREATE ROLE x LOGIN
	// PASSWORD '...', CREATE USER ... IDENTIFIED [WITH plugin] BY '...'.
	{re: regexp.MustCompile(`(?i)\b(?:(?:with|encrypted|login|user\s+[^\s;]+|role\s+[^\s;]+)\s+password|identified(?:\s+with\s+[^\s;]+)?\s+by(?:\s+password)?)\s+(?:'(?P<s>(?:[^'\n]|'')*)'|"(?P<s>[^"\n]*)")`),
		anchors: [][]string{{"password", "identified"}, {"'", `"`}}},
	// "key": "value" in JSON and similar quoted keys.
	{re: regexp.MustCompile(`(?i)["']` + secretKey + `["']\s*:\s*(?:"(?P<s>(?:[^"\\\n]|\\.)+)"|'(?P<s>[^'\n]+)')`),
		anchors: [][]string{secretWords, {":"}, followed(secretEnds, `"`, "'")}, secret: assigned},
	// key: value in YAML and other unquoted maps (password: x, DB_PASSWORD: x, {token: x}):
	// the key first on its line (after an indent or a list's "- ") or in a {...} map, so
	// prose ("the CSRF token: if ...") is not read as one; the value on the same line,
	// not a type (password: str) nor a name in code. A value in angle brackets is taken
	// whole, and kept when it is a placeholder (<your token>).
	{re: regexp.MustCompile(`(?im)(?:^[ \t]*(?:-[ \t]+)?|[{,][ \t]*)` + secretKey + `[ \t]*:[ \t]+(?:` + quoted(value) + `|(?P<s><[^<>\n]+>))(?P<t>[ \t]*[\[<|=]?)`),
		anchors: [][]string{secretWords, {":"}, followed(secretEnds, ":", " ", "\t")}, lineLocal: true, secret: yamlValue},
	// Command-line flags that take a secret: --password x, --api-key=x, --token x.
	{re: regexp.MustCompile(`(?i)(?:^|\s)--(?:[a-z0-9]+-)*(?:password|passwd|passphrase|token|secret|api-key|apikey|access-key|secret-key|private-key|client-secret|auth)(?:=|\s+)` + quoted(`[^\s"'-][^\s"']*`)),
		anchors: [][]string{{"--"}, {"pass", "token", "secret", "key", "auth"}}, secret: notNegated},
	// mysql and its tools take the password glued to -p (-psecret, -p'secret'); sshpass
	// and the logins (docker, podman, helm, oras, az) take it as the next word.
	{re: regexp.MustCompile(`\b(?:mysql|mysqldump|mysqladmin|mariadb|mariadb-dump|mysqlimport|mysqlshow|mysqlcheck)\b[^\n;&|]*?\s-p` + quoted(`[^\s"']+`)),
		anchors: [][]string{{"mysql", "mariadb"}, {"-p"}}},
	{re: regexp.MustCompile(`\b(?:curl|wget|http)\b[^\n;&|]*?\s(?:-u|--user)\s*(?:"[^\s:"]*:(?P<s>[^"\n]+)"|'[^\s:']*:(?P<s>[^'\n]+)'|["']?[^\s:"']*:(?P<s>[^\s"']+))`),
		anchors: [][]string{{"curl", "wget", "http"}, {"-u"}, {":"}}},
	{re: regexp.MustCompile(`\bredis-cli\b[^\n;&|]*?\s(?:-a|--pass)\s+` + arg), anchors: [][]string{{"redis-cli"}, {"-a", "--pass"}}},
	// A password fed to a registry login's --password-stdin by echo or printf, or a
	// here-string.
	{re: regexp.MustCompile(`\b(?:echo|printf)(?:\s+-[A-Za-z]+)*(?:\s+["']?%s(?:\\n)?["']?)?\s+` + arg + `[ \t]*\|[ \t]*(?:sudo\s+)?(?:docker|podman|nerdctl|helm\s+registry|oras|buildah|skopeo|crane)\s+(?:auth\s+)?login\b[^\n;&|]*?\s--password-stdin\b`),
		anchors: [][]string{{"echo", "printf"}, {"login"}, {"--password-stdin"}}},
	{re: regexp.MustCompile(`\s--password-stdin\b[^\n;&|]*?<<<[ \t]*` + arg), anchors: [][]string{{"--password-stdin"}, {"<<<"}}},
	{re: regexp.MustCompile(`\b(?:sshpass\s+-p|(?:docker|podman|helm\s+registry|oras|buildah|skopeo|az)\s+login\b[^\n;&|]*?\s-p)\s+` + arg),
		anchors: [][]string{{"sshpass", "login"}, {"-p"}}},
	// aws configure set aws_secret_access_key x; openssl's -k/-K and pass:x; ssh-keygen's
	// -N; a password echoed into sudo -S; htpasswd's password in batch mode (-b).
	{re: regexp.MustCompile(`\baws\s+configure\s+set\s+(?:[\w-]+\.)?(?:aws_secret_access_key|aws_session_token|aws_security_token)\s+` + arg),
		anchors: [][]string{{"configure"}, {"aws_secret_access_key", "aws_session_token", "aws_security_token"}}},
	{re: regexp.MustCompile(`\bopenssl\b[^\n;&|]*?\s-[kK]\s+` + arg), anchors: [][]string{{"openssl"}, {"-k", "-K"}}},
	{re: regexp.MustCompile(`\s-pass(?:in|out)?\s+(?:"pass:(?P<s>[^"\n]*)"|'pass:(?P<s>[^'\n]*)'|pass:(?P<s>[^\s"';&|<>]+))`),
		anchors: [][]string{{"-pass"}, {"pass:"}}},
	{re: regexp.MustCompile(`\bssh-keygen\b[^\n;&|]*?\s-N\s+` + arg), anchors: [][]string{{"ssh-keygen"}, {"-N"}}},
	{re: regexp.MustCompile(`\becho\s+` + arg + `[ \t]*\|[ \t]*sudo(?:\s+-[A-Za-z]+)*?\s+-[A-Za-z]*S\b`), anchors: [][]string{{"echo"}, {"sudo"}}},
	{re: regexp.MustCompile(`\bhtpasswd((?:\s+-[A-Za-z]+)+)\s+[^\s"';&|<>-][^\s;&|<>]*\s+[^\s"';&|<>]+\s+` + arg), anchors: [][]string{{"htpasswd"}}, secret: htpasswdFile},
	{re: regexp.MustCompile(`\bhtpasswd((?:\s+-[A-Za-z]+)+)\s+[^\s"';&|<>-][^\s;&|<>]*\s+` + arg), anchors: [][]string{{"htpasswd"}}, secret: htpasswdNoFile},
	// Well-known key shapes.
	{re: regexp.MustCompile(`\bsk-ant-[A-Za-z0-9_-]{16,}`), anchors: [][]string{{"sk-ant-"}}, lineLocal: true},
	{re: regexp.MustCompile(`\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}`), anchors: [][]string{{"sk-"}}, lineLocal: true},
	{re: regexp.MustCompile(`\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}`), anchors: [][]string{{"k_live_", "k_test_"}}, lineLocal: true},
	{re: regexp.MustCompile(`\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[A-Z0-9]{16}\b`), anchors: [][]string{{"AKIA", "ASIA", "AGPA", "AIDA", "AROA", "ANPA"}}, lineLocal: true},
	{re: regexp.MustCompile(`\bgh[pousr]_[A-Za-z0-9]{30,}`), anchors: [][]string{{"ghp_", "gho_", "ghu_", "ghs_", "ghr_"}}, lineLocal: true},
	{re: regexp.MustCompile(`\bgithub_pat_[A-Za-z0-9_]{22,}`), anchors: [][]string{{"github_pat_"}}, lineLocal: true},
	{re: regexp.MustCompile(`\bxox[abposr]-[A-Za-z0-9-]{10,}`), anchors: [][]string{{"xox"}}, lineLocal: true},
	{re: regexp.MustCompile(`\bglpat-[A-Za-z0-9_-]{20,}`), anchors: [][]string{{"glpat-"}}, lineLocal: true},
	{re: regexp.MustCompile(`\bAIza[0-9A-Za-z_-]{35}`), anchors: [][]string{{"AIza"}}, lineLocal: true},
	{re: regexp.MustCompile(`\bnpm_[A-Za-z0-9]{36}`), anchors: [][]string{{"npm_"}}, lineLocal: true},
	{re: regexp.MustCompile(`\bhf_[A-Za-z0-9]{30,}`), anchors: [][]string{{"hf_"}}, lineLocal: true},
	{re: regexp.MustCompile(`\beyJ[A-Za-z0-9_-]{6,}\.eyJ[A-Za-z0-9_-]{6,}\.[A-Za-z0-9_-]*`), anchors: [][]string{{"eyJ"}}, lineLocal: true},
	{re: regexp.MustCompile(`hooks\.slack\.com/services/(?P<s>[A-Za-z0-9/]+)`), anchors: [][]string{{"hooks.slack.com/services/"}}, lineLocal: true},
}

// Redact returns s with the secrets it recognizes replaced by Redacted: a URL's
// password (or a token used as its user), the values of secret-named keys in query
// strings, assignments, code and JSON (api_key=, token=, GITHUB_TOKEN=, api_key = "...",
// "password": ...), passwords set in SQL (WITH PASSWORD '...', IDENTIFIED BY '...'),
// Authorization and API-key headers and Bearer tokens, the values of secret flags
// (--password, --token, mysql's -p<password>, docker login -p, a password echoed into
// --password-stdin), well-known key shapes
// (sk-..., sk-ant-..., AKIA..., ghp_..., github_pat_..., xoxb-..., glpat-..., AIza...,
// JWTs) and PEM private key blocks. Values that name a secret rather than hold it ($VAR
// and $(cmd) where a shell expands them, ${VAR}, %VAR%, <your token>, a name in code)
// stay. It is deterministic and idempotent.
//
// Redact whole texts before cutting them: a secret cut short may no longer have the
// shape that finds it.
func Redact(s string) string { return redact(s).s }

// redact returns the scan of s redacted, for the extraction to look for its own
// patterns' anchors in what it already found.
func redact(s string) scan {
	t := newScan(s)
	for i := range rules {
		if out, changed := rules[i].apply(t.s, t.matches(rulePatterns[i], -1)); changed {
			t.reset(out)
		}
	}
	return t
}

// apply replaces the secret parts of matches idx (of r.re in s, in order) and says
// whether it replaced any.
func (r *rule) apply(s string, idx [][]int) (string, bool) {
	if idx == nil {
		return s, false
	}
	names := r.re.SubexpNames()
	var b strings.Builder
	last := 0
	for _, m := range idx {
		from, to := m[0], m[1]
		for i, name := range names {
			if name == "s" && m[2*i] >= 0 {
				from, to = m[2*i], m[2*i+1]
			}
		}
		if from < last || keep(s[from:to], literal(s[m[0]:from])) || r.secret != nil && !r.secret(s[m[0]:m[1]], s[from:to]) {
			continue
		}
		b.WriteString(s[last:from])
		b.WriteString(Redacted)
		last = to
	}
	if last == 0 {
		return s, false
	}
	b.WriteString(s[last:])
	return b.String(), true
}

// literal says a value is written where nothing expands $VAR: in single quotes, or
// after a quoted key ("password": "...", os.environ["PW"] = "..."). before is the
// match up to the value.
func literal(before string) bool {
	if strings.HasSuffix(before, "'") {
		return true
	}
	k := strings.TrimRight(before, "\" \t")
	k = strings.TrimRight(strings.TrimRight(k, ":="), " \t")
	return strings.HasSuffix(k, `"`) || strings.HasSuffix(k, "'") || strings.HasSuffix(k, "]")
}

// keep says a matched value is not a secret: a reference to one ($VAR, $(cmd) and
// ${VAR} where the shell expands them; ${VAR}, %VAR%, a %s verb, <your token> and
// {{token}} anywhere), a placeholder (xxx, ***, ...), or one already redacted. A value
// that only starts like a reference ($2b$10$..., '$uper...', %41bc..., <Q9x8Rt7...>)
// is not one. literal says nothing expands $VAR where the value is written.
func keep(v string, literal bool) bool {
	v = strings.Trim(v, `"'`)
	switch {
	case v == "", strings.HasPrefix(v, Redacted), strings.HasPrefix(v, "redacted]"):
		return true
	case strings.HasPrefix(v, "{{"), template.MatchString(v), percentRef.MatchString(v):
		return true
	case strings.HasPrefix(v, "$") && !literal && (v == "$" || strings.ContainsAny(v[1:2], "{(_") || isLetter(v[1])):
		return true
	case strings.HasPrefix(v, "<") && strings.HasSuffix(v, ">") && !tokenish(v):
		return true
	case strings.Trim(v, "*xX.…-_") == "":
		return true
	}
	switch strings.ToLower(v) { // an Authorization scheme whose credentials are gone
	case "bearer", "basic", "token", "digest", "bot", "apikey":
		return true
	}
	return false
}

// template is a whole value that names a variable for a tool to fill in: ${VAR}.
var template = regexp.MustCompile(`^\$\{[^{}]*\}$`)

// percentRef is a Windows %VAR%, a printf verb (%s, %-8v) or a lone % (the rest of
// %(name)s cut off): a value of that shape is filled in, not a secret.
var percentRef = regexp.MustCompile(`^%(?:[A-Za-z_]\w*%|[-+ #0-9.]*[A-Za-z])?$`)

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// plainName is a name in code or a number: password = new_password, key = lambda,
// max_token = 4096. An unquoted value of that shape after a blank "=" is not a secret.
var plainName = regexp.MustCompile(`^(?:[A-Za-z_][A-Za-z_]*|[0-9.]+)$`)

// spacedValue says a key = value with blanks holds a secret: not a call (getpass(),
// tokenizer(x)); unquoted, neither a name in code (settings.API_KEY, os.environ), a
// plain name without a digit (new_password, lambda) nor a number; and assigned.
func spacedValue(match, v string) bool {
	if strings.HasSuffix(match, "(") {
		return false
	}
	if i := strings.LastIndex(match, v); i > 0 && match[i-1] != '"' && match[i-1] != '\'' {
		if codeName.MatchString(v) || plainName.MatchString(v) {
			return false
		}
	}
	return assigned(match, v)
}

// tokenLike says a word after "Bearer" is a token, not prose: it holds a digit or is
// at least 20 characters long.
func tokenLike(_, w string) bool {
	return len(w) >= 20 || strings.ContainsAny(w, "0123456789")
}

// weakKeys are secret key names that also name things that are not secret
// (primary_key, sort key=..., a cache key): their value must look like a token.
var weakKey = regexp.MustCompile(`(?i)(?:^|[_.-])(?:key|sig|signature|credentials?|pwd)$`)

// assigned says the value a key is given is a secret: not a literal of a program
// (True, False, None, null), not a call (key=attrgetter("pk")), and, for a weak key
// name (key, sig, ...), token-like (tokenish).
func assigned(match, v string) bool {
	if strings.HasSuffix(match, "(") {
		return false
	}
	switch strings.ToLower(strings.Trim(v, `"'`)) {
	case "true", "false", "none", "null", "nil", "undefined", "yes", "no":
		return false
	}
	name := match
	if i := strings.IndexAny(name, "=:"); i >= 0 {
		name = name[:i]
	}
	name = strings.TrimLeftFunc(strings.TrimRight(name, `"' `), func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	})
	if weakKey.MatchString(name) && !strongKey.MatchString(name) {
		return tokenish(v)
	}
	return true
}

// tokenish says a value looks generated rather than named: at least 8 characters with
// at least 3 digits, or at least 20 with one (user_profile_v2 is a name; Q9x8Rt7Yu6 and
// AIzaSy... keys are not).
func tokenish(v string) bool {
	digits := strings.Count(v, "0")
	for d := '1'; d <= '9'; d++ {
		digits += strings.Count(v, string(d))
	}
	return len(v) >= 8 && digits >= 3 || len(v) >= 20 && digits >= 1
}

// strongKey are key names that always hold a secret.
var strongKey = regexp.MustCompile(`(?i)(?:api[_-]?key|apikey|access[_-]?key|secret[_-]?key|private[_-]?key|signature)$`)

// types are the type names code gives a secret-named field or parameter (password:
// str, token: string, api_key: Optional[str]): a YAML-like key: value match on one of
// them is an annotation, not a secret.
var types = map[string]bool{
	"str": true, "string": true, "int": true, "integer": true, "bool": true, "boolean": true, "bytes": true,
	"number": true, "any": true, "unknown": true, "object": true, "optional": true, "union": true,
	"secretstr": true, "secretbytes": true, "list": true, "dict": true, "char": true, "text": true, "uuid": true,
}

// codeName is a name in code (req.body.password, this.token, self._secret): a value of
// that shape after key: is a reference, not a secret.
var codeName = regexp.MustCompile(`^[A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)+$`)

// yamlValue says an unquoted key: value holds a secret: assigned, and neither a type
// annotation (a type name, or a value followed by [, <, | or =) nor a name in code.
func yamlValue(match, v string) bool {
	rest := match[strings.LastIndex(match, v)+len(v):]
	if strings.ContainsAny(rest, "[<|=") {
		return false
	}
	if rest == "" || rest[0] != '"' && rest[0] != '\'' { // unquoted
		word, _, _ := strings.Cut(v, "|")
		if types[strings.ToLower(word)] || codeName.MatchString(v) {
			return false
		}
	}
	if yamlSig.MatchString(strings.TrimSpace(match[:strings.Index(match, ":")])) {
		return tokenish(v) // signature: submit names a function's signature
	}
	return assigned(match, v)
}

// yamlSig is a key named signature or sig.
var yamlSig = regexp.MustCompile(`(?i)(?:^|[_.-])sig(?:nature)?$`)

// htpasswdFile says an htpasswd command whose password a rule found after a file and
// a user is in batch mode (-b) with a file (no -n); htpasswdNoFile, with -n and no file.
func htpasswdFile(match, _ string) bool {
	b, n := htpasswdFlags(match)
	return b && !n
}

func htpasswdNoFile(match, _ string) bool {
	b, n := htpasswdFlags(match)
	return b && n
}

// htpasswdFlags reads the flags after htpasswd: b (batch: the password is an
// argument) and n (no file: the result goes to standard output).
func htpasswdFlags(match string) (b, n bool) {
	fields := strings.Fields(match[strings.Index(match, "htpasswd")+len("htpasswd"):])
	for _, f := range fields {
		if !strings.HasPrefix(f, "-") {
			break
		}
		b = b || strings.Contains(f, "b")
		n = n || strings.Contains(f, "n")
	}
	return b, n
}

// notNegated says a flag is not a --no-... flag, whose next word is not its value.
func notNegated(match, _ string) bool { return !strings.Contains(strings.ToLower(match), "--no-") }

// RedactPrefix is Redact of at most the first n bytes of s, for texts too large to
// redact whole, without reading the rest: the cut is on a rune boundary and the last,
// possibly cut, word is left out, so no part of a secret that runs past n survives (a
// PEM block that starts before the cut is redacted to it). more says s went on.
func RedactPrefix(s string, n int) (out string, more bool) {
	t, more := redactPrefix(s, n)
	return t.s, more
}

// redactPrefix is RedactPrefix, returning the scan of what it returns.
func redactPrefix(s string, n int) (scan, bool) {
	if len(s) <= n {
		return redact(s), false
	}
	s = s[:max(n, 0)]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	if i := strings.LastIndexAny(s, " \t\r\n"); i >= 0 {
		s = s[:i]
	} else {
		s = ""
	}
	return redact(s), true
}
