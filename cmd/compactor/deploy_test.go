package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/conf"
	"github.com/nats-io/nats-server/v2/server"
	"go.yaml.in/yaml/v3"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas/policy"
)

// The deployment files of deploy/ (and the Dockerfile) checked against the code: every
// variable, role, user, port, probe path, stream and consumer they name must be one the
// code and deploy/nats/accounts.conf know, and the files must agree with each other.
// checkDeployment returns what is wrong instead of failing a test, so that
// TestDeployChecksCatchBrokenManifests can break each file on purpose and see each
// check fail.

// repoRoot is the repository, seen from this package.
const repoRoot = "../.."

// The files the checks read, relative to the repository root.
const (
	dockerfilePath   = "Dockerfile"
	dockerignorePath = ".dockerignore"
	composePath      = "deploy/compose.yaml"
	kubeDir          = "deploy/kubernetes"
	kustomizePath    = "deploy/kubernetes/kustomization.yaml"
	helmValuesPath   = "deploy/helm/nats-values.yaml"
	accountsPath     = "deploy/nats/accounts.conf"
	deployDocPath    = "docs/deploying.md" // how to deploy: Secrets, Helm
)

// adminUser provisions (compactor provision, a one-shot); the serve roles connect as
// the user of their own name, and so does the proxy (proxyRole).
const (
	adminUser = "admin"
	proxyRole = "proxy"
)

// provisionArgs, serveArgs and proxyArgs are the command lines of the admin's one-shot,
// of the roles and of the proxy.
var (
	provisionArgs = []string{"provision"}
	serveArgs     = []string{"serve"}
	proxyArgs     = []string{"proxy"}
)

// processKind is what a process of the deployment runs.
type processKind int

const (
	serveProcess     processKind = iota // compactor serve: one role
	provisionProcess                    // compactor provision: the admin's one-shot
	proxyProcess                        // compactor proxy: the proxy role alone
)

// kindOf is the kind of a process with these arguments.
func kindOf(args []string) processKind {
	switch {
	case slices.Equal(args, provisionArgs):
		return provisionProcess
	case slices.Equal(args, proxyArgs):
		return proxyProcess
	}
	return serveProcess
}

// proxyListenVar is where the proxy listens; serve runs the proxy role beside its own
// when it is set.
const proxyListenVar = "COMPACTOR_PROXY_LISTEN"

// proxyPort is the port of a proxy process's COMPACTOR_PROXY_LISTEN (0 when none).
func proxyPort(vars map[string]string) int {
	_, port, _ := net.SplitHostPort(vars[proxyListenVar])
	n, _ := strconv.Atoi(port)
	return n
}

// argsOf reads a command or args list of a manifest.
func argsOf(v any) []string {
	var out []string
	for _, a := range asList(v) {
		out = append(out, str(a))
	}
	return out
}

// streamSettings are the stream settings of a process: what provision creates and
// what every role checks at start (a difference stops it).
func streamSettings(e Env) jetstream.Config {
	c := e.jetstream()
	c.UpdateExisting = false
	return c
}

// problems collects what the checks found wrong.
type problems []string

func (p *problems) addf(format string, args ...any) { *p = append(*p, fmt.Sprintf(format, args...)) }

// deployment is what the checks read, parsed.
type deployment struct {
	root string
	// hostEnv is the environment Compose interpolates ${VAR} from (none: the defaults).
	hostEnv map[string]string

	goVersion   string // go.mod's go line, e.g. 1.26.0
	natsVersion string // the nats-server module go.mod pins, e.g. 2.15.2

	docker     []dockerStage
	ignore     []string
	compose    map[string]any // interpolated
	rawCompose map[string]any
	kube       []kubeDoc
	kustom     map[string]any
	helm       map[string]any
	accounts   map[string]natsUser // by user name
	// passwordVars are the variables accounts.conf reads passwords from, in file order.
	passwordVars []string
	readme       string
}

// kubeDoc is one document of a Kubernetes manifest.
type kubeDoc struct {
	file string
	obj  map[string]any
}

func (d kubeDoc) kind() string { return str(dig(d.obj, "kind")) }
func (d kubeDoc) name() string { return str(dig(d.obj, "metadata", "name")) }
func (d kubeDoc) String() string {
	return fmt.Sprintf("%s: %s %s", d.file, d.kind(), d.name())
}

// natsUser is a user of accounts.conf.
type natsUser struct {
	account     string
	jetstream   bool   // its account has JetStream
	passwordVar string // the variable its password is read from
	// subscribe is what it may subscribe to; nil when it has no permissions block
	// (everything in its account).
	subscribe []string
}

// envValidator reads a process's COMPACTOR_ variables as the command does.
type envValidator func(vars map[string]string) (Env, error)

// loadDeployment reads and parses every file; what cannot be read or parsed is a
// problem.
func loadDeployment(root string, hostEnv map[string]string, p *problems) *deployment {
	d := &deployment{root: root, hostEnv: hostEnv}
	read := func(rel string) string {
		data, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			p.addf("%s: %v", rel, err)
		}
		return string(data)
	}
	mod := read("go.mod")
	if m := regexp.MustCompile(`(?m)^go (\S+)$`).FindStringSubmatch(mod); m != nil {
		d.goVersion = m[1]
	}
	if m := regexp.MustCompile(`(?m)^\s*github\.com/nats-io/nats-server/v2 v(\S+)`).FindStringSubmatch(mod); m != nil {
		d.natsVersion = m[1]
	}
	var err error
	if d.docker, err = parseDockerfile(read(dockerfilePath)); err != nil {
		p.addf("%s: %v", dockerfilePath, err)
	}
	for _, line := range strings.Split(read(dockerignorePath), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			d.ignore = append(d.ignore, line)
		}
	}
	d.rawCompose = yamlMap(p, composePath, read(composePath))
	if c, err := interpolate(d.rawCompose, hostEnv); err != nil {
		p.addf("%s: %v", composePath, err)
	} else {
		d.compose, _ = c.(map[string]any)
	}
	d.helm = yamlMap(p, helmValuesPath, read(helmValuesPath))
	d.kustom = yamlMap(p, kustomizePath, read(kustomizePath))
	d.readme = read(deployDocPath)

	// Every YAML file under deploy/ is a known one, or a Kubernetes manifest: none
	// escapes the checks.
	_ = filepath.WalkDir(filepath.Join(root, "deploy"), func(pth string, e fs.DirEntry, err error) error {
		if err != nil {
			p.addf("deploy: %v", err)
			return nil
		}
		rel, _ := filepath.Rel(root, pth)
		rel = filepath.ToSlash(rel)
		if e.IsDir() && (rel == "deploy/examples" || e.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if e.IsDir() || !(strings.HasSuffix(rel, ".yaml") || strings.HasSuffix(rel, ".yml")) {
			return nil
		}
		switch {
		case rel == composePath || rel == helmValuesPath || rel == kustomizePath:
		case strings.HasPrefix(rel, kubeDir+"/"):
			dec := yaml.NewDecoder(strings.NewReader(read(rel)))
			for {
				var obj map[string]any
				if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
					break
				} else if err != nil {
					p.addf("%s: %v", rel, err)
					break
				}
				if obj != nil {
					d.kube = append(d.kube, kubeDoc{file: rel, obj: obj})
				}
			}
		default:
			p.addf("%s: a YAML file the deployment checks do not know (add it to deploy_test.go)", rel)
		}
		return nil
	})
	d.readAccounts(p, read(accountsPath))
	return d
}

func yamlMap(p *problems, file, text string) map[string]any {
	var m map[string]any
	if err := yaml.Unmarshal([]byte(text), &m); err != nil {
		p.addf("%s: %v", file, err)
	}
	return m
}

// readAccounts parses accounts.conf with the NATS server's own parser; each password
// variable is set, while it parses, to a value naming the variable.
func (d *deployment) readAccounts(p *problems, text string) {
	d.accounts = map[string]natsUser{}
	vars := map[string]string{}
	re := regexp.MustCompile(`(?:password|pass)\s*[:=]\s*\$([A-Za-z_][A-Za-z0-9_]*)`)
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		for _, m := range re.FindAllStringSubmatch(line, -1) {
			if _, ok := vars[m[1]]; !ok {
				d.passwordVars = append(d.passwordVars, m[1])
			}
			vars[m[1]] = "var:" + m[1]
		}
	}
	var parsed map[string]any
	var err error
	withEnv(vars, func() { parsed, err = conf.Parse(text) })
	if err != nil {
		p.addf("%s: %v", accountsPath, err)
		return
	}
	for account, a := range asMap(parsed["accounts"]) {
		js := fmt.Sprint(dig(a, "jetstream"))
		for _, u := range asList(dig(a, "users")) {
			name := str(dig(u, "user"))
			pw := str(dig(u, "password"))
			if pw == "" {
				pw = str(dig(u, "pass"))
			}
			nu := natsUser{account: account, jetstream: js == "enabled" || js == "true", passwordVar: strings.TrimPrefix(pw, "var:")}
			if !strings.HasPrefix(pw, "var:") {
				p.addf("%s: user %s: its password is not read from the environment ($NATS_…_PASSWORD)", accountsPath, name)
			}
			if perms := dig(u, "permissions"); perms != nil {
				nu.subscribe = []string{}
				sub := dig(perms, "subscribe")
				if allow := dig(sub, "allow"); allow != nil {
					sub = allow
				}
				for _, s := range asList(sub) {
					nu.subscribe = append(nu.subscribe, str(s))
				}
				if s, ok := sub.(string); ok {
					nu.subscribe = append(nu.subscribe, s)
				}
			}
			d.accounts[name] = nu
		}
	}
	if len(d.accounts) == 0 {
		p.addf("%s: no users", accountsPath)
	}
}

// withEnv runs fn with vars set in the process's environment and the variables of
// unset removed from it, then puts back what was there. The NATS configuration parser
// reads variables only from there.
func withEnv(vars map[string]string, fn func(), unset ...string) {
	type saved struct {
		v  string
		ok bool
	}
	old := map[string]saved{}
	for _, k := range unset {
		ov, ok := os.LookupEnv(k)
		old[k] = saved{ov, ok}
		os.Unsetenv(k)
	}
	for k, v := range vars {
		if _, done := old[k]; !done {
			ov, ok := os.LookupEnv(k)
			old[k] = saved{ov, ok}
		}
		os.Setenv(k, v)
	}
	defer func() {
		for k, s := range old {
			if s.ok {
				os.Setenv(k, s.v)
			} else {
				os.Unsetenv(k)
			}
		}
	}()
	fn()
}

// validateProcessEnv reads vars as the command does (loadEnv), with the process's
// environment holding exactly vars among the COMPACTOR_ and OPENAI_ variables while it
// reads them: loadEnv may read the environment as well as its lookup.
func validateProcessEnv(vars map[string]string) (Env, error) {
	var unset []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := vars[k]; !ok && (strings.HasPrefix(k, envPrefix+"_") || strings.HasPrefix(k, "OPENAI_")) {
			unset = append(unset, k)
		}
	}
	var e Env
	var err error
	withEnv(vars, func() {
		e, err = loadEnv(func(k string) (string, bool) { v, ok := vars[k]; return v, ok })
	}, unset...)
	return e, err
}

// knownVariables are the COMPACTOR_ variables the command reads: Env's and the policy
// keys'.
func knownVariables() map[string]bool {
	known := map[string]bool{}
	t := reflect.TypeOf(Env{})
	for i := range t.NumField() {
		if tag := t.Field(i).Tag.Get("envconfig"); tag != "" {
			known[envPrefix+"_"+tag] = true
		}
	}
	for _, k := range policy.Keys {
		known[k.Env()] = true
	}
	return known
}

// secretVariables hold secrets: given from a Secret (Kubernetes) or the host's
// environment (Compose), never written in a file.
var secretVariables = []string{"COMPACTOR_NATS_PASSWORD", "COMPACTOR_NATS_TOKEN", "COMPACTOR_LLM_API_KEY",
	"COMPACTOR_PROXY_UPSTREAM_KEY", "COMPACTOR_PROXY_ANTHROPIC_UPSTREAM_KEY", "COMPACTOR_PROXY_OWNER_KEY"}

// checkProcessEnv checks the variables of one process: every COMPACTOR_ variable is
// one the command reads, the values are valid together, a serve process runs one role
// as the user of that role (and no proxy beside it), the proxy runs as the proxy user
// on an address reachable from outside the container, and the provision one-shot runs
// as the admin, each with the user's inbox prefix and password. It returns the
// process's Env (zero when invalid).
func (d *deployment) checkProcessEnv(p *problems, where string, vars map[string]string, validate envValidator, kind processKind) (Env, bool) {
	provision := kind == provisionProcess
	known := knownVariables()
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		if strings.HasPrefix(k, envPrefix+"_") && !known[k] {
			p.addf("%s: %s is not a variable compactor reads", where, k)
		}
	}
	e, err := validate(vars)
	if err != nil {
		p.addf("%s: %v", where, err)
		return e, false
	}
	r, _ := e.roles()
	var names []string
	for _, role := range []struct {
		on   bool
		name string
	}{{r.Trigger, "trigger"}, {r.Worker, "worker"}, {r.API, "api"}} {
		if role.on {
			names = append(names, role.name)
		}
	}
	switch kind {
	case proxyProcess:
		names = []string{proxyRole} // compactor proxy runs no other role
		d.checkProxyListen(p, where, vars, e)
	case serveProcess:
		if len(names) != 1 {
			p.addf("%s: COMPACTOR_ROLES=%s: run one role per process, so that each scales on its own and has its own user", where, e.Roles)
		}
		if vars[proxyListenVar] != "" {
			p.addf("%s: %s=%s runs the proxy beside role %s: run it as its own process (compactor proxy), as user %s",
				where, proxyListenVar, vars[proxyListenVar], e.Roles, proxyRole)
		}
	}
	u, ok := d.accounts[e.NATSUser]
	switch {
	case e.NATSUser == "":
		p.addf("%s: no COMPACTOR_NATS_USER: connect as the role's user of %s", where, accountsPath)
	case !ok:
		p.addf("%s: COMPACTOR_NATS_USER=%s is not a user of %s", where, e.NATSUser, accountsPath)
	case provision && e.NATSUser != adminUser:
		p.addf("%s: COMPACTOR_NATS_USER=%s provisions: only %s may create the streams in %s", where, e.NATSUser, adminUser, accountsPath)
	case !provision && e.NATSUser == adminUser:
		p.addf("%s: COMPACTOR_NATS_USER=%s runs role %s: only the provision one-shot needs the %s's rights; each role connects as the user of its name in %s",
			where, e.NATSUser, e.Roles, adminUser, accountsPath)
	case !provision && (len(names) != 1 || e.NATSUser != names[0]):
		p.addf("%s: COMPACTOR_NATS_USER=%s runs role %s: each role connects as the user of its name in %s",
			where, e.NATSUser, e.Roles, accountsPath)
	case !u.jetstream:
		p.addf("%s: user %s is in account %s, which has no JetStream", where, e.NATSUser, u.account)
	}
	if want := "_INBOX_" + e.NATSUser; e.NATSUser != "" && e.NATSInbox != want {
		p.addf("%s: COMPACTOR_NATS_INBOX_PREFIX=%s: user %s reads its replies on %s", where, e.NATSInbox, e.NATSUser, want)
	} else if ok && u.subscribe != nil && !slices.Contains(u.subscribe, want+".>") {
		p.addf("%s: %s does not let user %s subscribe to %s.>, where its replies come", where, accountsPath, e.NATSUser, want)
	}
	if provision {
		return e, true // no listener: it exits once done
	}
	host, _, err := net.SplitHostPort(e.HTTPListen)
	if err != nil {
		p.addf("%s: COMPACTOR_HTTP_LISTEN=%q: probes and scrapes need the operators' listener", where, e.HTTPListen)
	} else if host != "" && host != "0.0.0.0" && host != "::" && host != "[::]" {
		p.addf("%s: COMPACTOR_HTTP_LISTEN=%s: bound to %s, the listener cannot be reached from outside the container", where, e.HTTPListen, host)
	}
	return e, true
}

// checkProxyListen checks where a proxy process listens: an address reachable from
// outside the container, on another port than the operators' listener.
func (d *deployment) checkProxyListen(p *problems, where string, vars map[string]string, e Env) {
	host, _, err := net.SplitHostPort(vars[proxyListenVar])
	switch {
	case err != nil:
		p.addf("%s: %s=%q: the proxy needs host:port", where, proxyListenVar, vars[proxyListenVar])
	case host != "0.0.0.0" && host != "::" && host != "[::]" && host != "":
		p.addf("%s: %s=%s: bound to %s, the agents cannot reach the proxy from outside the container", where, proxyListenVar, vars[proxyListenVar], host)
	case proxyPort(vars) == httpPort(e):
		p.addf("%s: %s=%s: the same port as COMPACTOR_HTTP_LISTEN", where, proxyListenVar, vars[proxyListenVar])
	}
}

// httpPort is the port of COMPACTOR_HTTP_LISTEN.
func httpPort(e Env) int {
	_, port, _ := net.SplitHostPort(e.HTTPListen)
	n, _ := strconv.Atoi(port)
	return n
}

// conversationPolicy is the part of a process's policy that decides when and how a
// conversation is compacted: the trigger, the workers and the service must agree on it.
func conversationPolicy(e Env) map[string]string {
	out := map[string]string{}
	for _, k := range policy.Keys {
		if k.Scope == policy.Conversation {
			out[k.Name] = e.Policy[k.Name]
		}
	}
	return out
}

// checkDeployment runs every check.
func checkDeployment(d *deployment, validate envValidator) problems {
	var p problems
	exposed := d.checkDockerfile(&p)
	d.checkCompose(&p, validate, exposed)
	workers := d.checkKubernetes(&p, validate, exposed)
	d.checkHelm(&p)
	d.checkKEDA(&p, workers)
	return p
}

// --- Dockerfile ---

type dockerStage struct {
	base, name string
	instrs     []dockerInstr
}

type dockerInstr struct {
	cmd, args string
}

// parseDockerfile reads instructions (continuation lines joined, comments dropped)
// into stages.
func parseDockerfile(text string) ([]dockerStage, error) {
	var stages []dockerStage
	var cur strings.Builder
	sc := bufio.NewScanner(strings.NewReader(text))
	var lines []string
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if cur.Len() == 0 && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if strings.HasPrefix(line, "#") {
			continue // a comment inside a continued instruction
		}
		if s, ok := strings.CutSuffix(line, `\`); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(line)
		lines = append(lines, cur.String())
		cur.Reset()
	}
	for _, l := range lines {
		cmd, args, _ := strings.Cut(l, " ")
		cmd, args = strings.ToUpper(cmd), strings.TrimSpace(args)
		if cmd == "FROM" {
			f := strings.Fields(args)
			st := dockerStage{base: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				st.name = f[2]
			}
			stages = append(stages, st)
			continue
		}
		if len(stages) == 0 {
			if cmd == "ARG" {
				continue
			}
			return nil, fmt.Errorf("%s before the first FROM", cmd)
		}
		stages[len(stages)-1].instrs = append(stages[len(stages)-1].instrs, dockerInstr{cmd, args})
	}
	return stages, nil
}

// dockerShellWords splits a command line as sh does for plain words and quotes; anything
// that makes it more than one simple command is refused.
func dockerShellWords(s string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\'' || c == '"':
			j := strings.IndexByte(s[i+1:], c)
			if j < 0 {
				return nil, fmt.Errorf("unterminated quote in %q", s)
			}
			w.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		case strings.IndexByte(";&|<>`$()", c) >= 0:
			return nil, fmt.Errorf("%q is more than one plain command", s)
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words, nil
}

// goBuild is the go build command of the Dockerfile.
type goBuild struct {
	env      map[string]string // the variables the RUN sets
	argv     []string          // go build ...
	flags    map[string]string // -flag → value ("" for a boolean)
	packages []string
	output   string
}

// dockerGoBuild finds the RUN of the build stage that runs go build, and parses it.
func dockerGoBuild(stages []dockerStage) (*goBuild, error) {
	if len(stages) == 0 {
		return nil, errors.New("no stages")
	}
	for _, in := range stages[0].instrs {
		if in.cmd != "RUN" || !strings.Contains(in.args, "go build") {
			continue
		}
		words, err := dockerShellWords(in.args)
		if err != nil {
			return nil, fmt.Errorf("RUN %s: %v (run go build alone in its RUN)", in.args, err)
		}
		b := &goBuild{env: map[string]string{}, flags: map[string]string{}}
		for len(words) > 0 && strings.HasPrefix(words[0], "--") { // RUN's own flags (--mount)
			words = words[1:]
		}
		for len(words) > 0 && strings.Contains(words[0], "=") && !strings.HasPrefix(words[0], "-") {
			k, v, _ := strings.Cut(words[0], "=")
			b.env[k] = v
			words = words[1:]
		}
		if len(words) < 2 || words[0] != "go" || words[1] != "build" {
			return nil, fmt.Errorf("RUN %s: not a go build command", in.args)
		}
		b.argv = words
		valued := map[string]bool{"-o": true, "-ldflags": true, "-tags": true, "-gcflags": true, "-mod": true, "-p": true, "-buildvcs": true}
		rest := words[2:]
		for len(rest) > 0 && strings.HasPrefix(rest[0], "-") {
			f := rest[0]
			rest = rest[1:]
			if k, v, ok := strings.Cut(f, "="); ok {
				b.flags[k] = v
			} else if valued[f] && len(rest) > 0 {
				b.flags[f] = rest[0]
				rest = rest[1:]
			} else {
				b.flags[f] = ""
			}
		}
		b.packages, b.output = rest, b.flags["-o"]
		return b, nil
	}
	return nil, errors.New("the first stage runs no go build")
}

// checkDockerfile checks the image's build and final stage; it returns the ports the
// image exposes.
func (d *deployment) checkDockerfile(p *problems) map[int]bool {
	exposed := map[int]bool{}
	if len(d.docker) < 2 {
		p.addf("%s: %d stages: build in one (golang), run in another (small, non-root)", dockerfilePath, len(d.docker))
		return exposed
	}
	build, final := d.docker[0], d.docker[len(d.docker)-1]
	goMinor := d.goVersion // 1.26.0 → 1.26
	if parts := strings.Split(d.goVersion, "."); len(parts) >= 2 {
		goMinor = parts[0] + "." + parts[1]
	}
	if img, tag, _ := strings.Cut(build.base, ":"); img != "golang" || (tag != goMinor && !strings.HasPrefix(tag, goMinor+"-") && !strings.HasPrefix(tag, goMinor+".")) {
		p.addf("%s: the build stage is FROM %s; go.mod wants go %s (golang:%s)", dockerfilePath, build.base, d.goVersion, goMinor)
	}
	b, err := dockerGoBuild(d.docker)
	if err != nil {
		p.addf("%s: %v", dockerfilePath, err)
		return exposed
	}
	if b.env["CGO_ENABLED"] != "0" {
		p.addf("%s: the go build runs without CGO_ENABLED=0: the binary would need the builder's libc, which the final stage does not have", dockerfilePath)
	}
	if _, ok := b.flags["-trimpath"]; !ok {
		p.addf("%s: the go build has no -trimpath (the builder's paths stay in the binary)", dockerfilePath)
	}
	if ld := strings.Fields(b.flags["-ldflags"]); !slices.Contains(ld, "-s") || !slices.Contains(ld, "-w") {
		p.addf("%s: the go build's -ldflags %q lack -s and -w (symbol table and DWARF stay in the image)", dockerfilePath, b.flags["-ldflags"])
	}
	if !slices.Equal(b.packages, []string{"./cmd/compactor"}) {
		p.addf("%s: the go build builds %v, not ./cmd/compactor", dockerfilePath, b.packages)
	}
	if b.output == "" {
		p.addf("%s: the go build has no -o", dockerfilePath)
	}

	switch {
	case strings.HasPrefix(final.base, "gcr.io/distroless/static") && strings.HasSuffix(final.base, ":nonroot"):
		// CA certificates, tzdata and a non-root user come with it.
	case final.base == "scratch":
		if !slices.ContainsFunc(final.instrs, func(in dockerInstr) bool {
			return in.cmd == "COPY" && strings.Contains(in.args, "/etc/ssl/certs/")
		}) {
			p.addf("%s: FROM scratch without CA certificates: TLS to NATS or the LLM cannot verify a server", dockerfilePath)
		}
	default:
		p.addf("%s: the final stage is FROM %s: use gcr.io/distroless/static…:nonroot or scratch (small, no shell)", dockerfilePath, final.base)
	}
	var copied, entry, user string
	var cmd []string
	for _, in := range final.instrs {
		switch in.cmd {
		case "COPY":
			f := strings.Fields(in.args)
			from := ""
			for len(f) > 0 && strings.HasPrefix(f[0], "--") {
				if v, ok := strings.CutPrefix(f[0], "--from="); ok {
					from = v
				}
				f = f[1:]
			}
			if len(f) == 2 && (from == build.name || from == "0") && f[0] == b.output {
				copied = f[1]
			}
		case "ENTRYPOINT":
			var argv []string
			if err := json.Unmarshal([]byte(in.args), &argv); err != nil || len(argv) == 0 {
				p.addf("%s: ENTRYPOINT %s is not the exec form [\"/path/compactor\"] (no shell in the image to run the other)", dockerfilePath, in.args)
			} else {
				entry = argv[0]
			}
		case "CMD":
			if err := json.Unmarshal([]byte(in.args), &cmd); err != nil {
				p.addf("%s: CMD %s is not the exec form", dockerfilePath, in.args)
			}
		case "USER":
			user = in.args
		case "EXPOSE":
			for _, f := range strings.Fields(in.args) {
				n, err := strconv.Atoi(strings.TrimSuffix(f, "/tcp"))
				if err != nil {
					p.addf("%s: EXPOSE %s", dockerfilePath, f)
				}
				exposed[n] = true
			}
		case "ENV":
			vars := map[string]string{}
			for _, kv := range strings.Fields(in.args) {
				k, v, _ := strings.Cut(kv, "=")
				vars[k] = v
			}
			known := knownVariables()
			for k := range vars {
				if strings.HasPrefix(k, envPrefix+"_") && !known[k] {
					p.addf("%s: ENV %s is not a variable compactor reads", dockerfilePath, k)
				}
			}
		}
	}
	if copied == "" {
		p.addf("%s: the final stage does not COPY --from=%s the binary the go build writes (%s)", dockerfilePath, build.name, b.output)
	} else if entry != copied {
		p.addf("%s: ENTRYPOINT runs %q, but the binary is copied to %q", dockerfilePath, entry, copied)
	}
	if len(cmd) > 0 && cmd[0] != "serve" {
		p.addf("%s: CMD %v: the image's default is serve", dockerfilePath, cmd)
	}
	if uid := dockerUID(user); uid <= 0 {
		p.addf("%s: USER %q: the final stage must run as a numeric non-root user (Kubernetes' runAsNonRoot checks numbers only)", dockerfilePath, user)
	}
	for _, pat := range d.ignore {
		if strings.ContainsAny(pat, "*?[!") {
			p.addf("%s: pattern %q: TestDockerfileBuildsAStaticBinary applies plain paths only", dockerignorePath, pat)
		}
		for _, need := range []string{"go.mod", "go.sum", "cmd", "jetstream", "schemas", "summarizer", "triggers", "pipeline"} {
			if path.Clean(pat) == need || strings.HasPrefix(need+"/", path.Clean(pat)+"/") {
				p.addf("%s: %q leaves %s out of the build context", dockerignorePath, pat, need)
			}
		}
	}
	return exposed
}

// dockerUID is the numeric user of a USER instruction, -1 when it is not a number.
func dockerUID(user string) int {
	u, _, _ := strings.Cut(user, ":")
	n, err := strconv.Atoi(u)
	if err != nil {
		return -1
	}
	return n
}

// imageUID is the image's user.
func (d *deployment) imageUID() int {
	if len(d.docker) == 0 {
		return -1
	}
	uid := -1
	for _, in := range d.docker[len(d.docker)-1].instrs {
		if in.cmd == "USER" {
			uid = dockerUID(in.args)
		}
	}
	return uid
}

// --- Compose ---

// interpolate replaces ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?error},
// ${VAR?error} and $VAR in every string of v, as Compose does; $$ is a dollar.
func interpolate(v any, env map[string]string) (any, error) {
	switch x := v.(type) {
	case string:
		return interpolateString(x, env)
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			r, err := interpolate(e, env)
			if err != nil {
				return nil, err
			}
			out[k] = r
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			r, err := interpolate(e, env)
			if err != nil {
				return nil, err
			}
			out[i] = r
		}
		return out, nil
	}
	return v, nil
}

var composeVarRE = regexp.MustCompile(`\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)`)

func interpolateString(s string, env map[string]string) (string, error) {
	var err error
	out := composeVarRE.ReplaceAllStringFunc(s, func(m string) string {
		if m == "$$" {
			return "$"
		}
		sm := composeVarRE.FindStringSubmatch(m)
		name, op, arg := sm[1], sm[2], sm[3]
		if name == "" {
			name = sm[4]
		}
		v, ok := env[name]
		switch op {
		case ":-":
			if v == "" {
				return arg
			}
		case "-":
			if !ok {
				return arg
			}
		case ":?", "?":
			if !ok || (op == ":?" && v == "") {
				err = fmt.Errorf("%s is required: %s", name, arg)
			}
		}
		return v
	})
	return out, err
}

// composeService is one service of the Compose file.
type composeService struct {
	name string
	m    map[string]any // interpolated
	raw  map[string]any
}

func (s composeService) env() map[string]string {
	out := map[string]string{}
	switch e := dig(s.m, "environment").(type) {
	case map[string]any:
		for k, v := range e {
			out[k] = scalar(v)
		}
	case []any:
		for _, kv := range e {
			k, v, _ := strings.Cut(str(kv), "=")
			out[k] = v
		}
	}
	return out
}

func (s composeService) rawEnv(name string) string { return scalar(dig(s.raw, "environment", name)) }

func (s composeService) replicas() int {
	if n, ok := dig(s.m, "deploy", "replicas").(int); ok {
		return n
	}
	if n, ok := dig(s.m, "scale").(int); ok {
		return n
	}
	return 1
}

// mounts are the service's bind mounts (host path relative to deploy/, container path)
// and named volumes (name, container path).
func (s composeService) mounts() (binds, named [][2]string) {
	for _, v := range asList(dig(s.m, "volumes")) {
		f := strings.Split(str(v), ":")
		if len(f) < 2 {
			continue
		}
		if strings.HasPrefix(f[0], ".") || strings.HasPrefix(f[0], "/") {
			binds = append(binds, [2]string{f[0], f[1]})
		} else {
			named = append(named, [2]string{f[0], f[1]})
		}
	}
	return binds, named
}

func (d *deployment) composeServices() []composeService {
	var out []composeService
	svcs := asMap(dig(d.compose, "services"))
	for _, name := range slices.Sorted(maps.Keys(svcs)) {
		out = append(out, composeService{name: name, m: asMap(svcs[name]), raw: asMap(dig(d.rawCompose, "services", name))})
	}
	return out
}

// composeNode is a NATS service of the Compose file with its server options, read by
// the NATS server from the mounted files with the service's environment.
type composeNode struct {
	composeService
	confHost  string // the configuration file, on the host
	confMount string // and where the service mounts it
	opts      *server.Options
}

// composeNATS reads the NATS services.
func (d *deployment) composeNATS(p *problems) []composeNode {
	var nodes []composeNode
	for _, s := range d.composeServices() {
		img := str(dig(s.m, "image"))
		if !strings.HasPrefix(img, "nats:") {
			continue
		}
		n := composeNode{composeService: s}
		where := fmt.Sprintf("%s: service %s", composePath, s.name)
		args := asList(dig(s.m, "command"))
		container := ""
		for i, a := range args {
			if (str(a) == "--config" || str(a) == "-c") && i+1 < len(args) {
				container = str(args[i+1])
			}
		}
		binds, _ := s.mounts()
		for _, b := range binds {
			if b[1] == container {
				n.confHost, n.confMount = filepath.Join(d.root, "deploy", b[0]), container
			}
		}
		if n.confHost == "" {
			p.addf("%s: runs --config %q, which no volume mounts from deploy/", where, container)
			nodes = append(nodes, n)
			continue
		}
		// Every file the configuration includes is mounted beside it, from beside it.
		text, _ := os.ReadFile(n.confHost)
		for _, m := range regexp.MustCompile(`(?m)^\s*include\s+"?([^"\s;]+)`).FindAllStringSubmatch(string(text), -1) {
			inContainer := path.Join(path.Dir(container), m[1])
			onHost := filepath.Join(filepath.Dir(n.confHost), m[1])
			if !slices.ContainsFunc(binds, func(b [2]string) bool {
				return b[1] == inContainer && filepath.Join(d.root, "deploy", b[0]) == onHost
			}) {
				p.addf("%s: %s includes %s, which is not mounted at %s", where, filepath.Base(n.confHost), m[1], inContainer)
			}
		}
		var err error
		withEnv(s.env(), func() { n.opts, err = server.ProcessConfigFile(n.confHost) })
		if err != nil {
			p.addf("%s: %v", where, err)
			n.opts = nil
		}
		nodes = append(nodes, n)
	}
	return nodes
}

func (d *deployment) checkCompose(p *problems, validate envValidator, exposed map[int]bool) {
	if d.compose == nil {
		return
	}
	services := d.composeServices()
	byName := map[string]composeService{}
	for _, s := range services {
		byName[s.name] = s
	}
	for _, s := range services {
		for dep := range asMap(dig(s.m, "depends_on")) {
			if _, ok := byName[dep]; !ok {
				p.addf("%s: service %s depends on %s, which is not a service", composePath, s.name, dep)
			}
		}
		for _, dep := range asList(dig(s.m, "depends_on")) {
			if _, ok := byName[str(dep)]; !ok {
				p.addf("%s: service %s depends on %s, which is not a service", composePath, s.name, str(dep))
			}
		}
	}
	volumes := asMap(dig(d.compose, "volumes"))

	// The NATS cluster.
	nodes := d.composeNATS(p)
	if len(nodes) != 3 {
		p.addf("%s: %d NATS services; the deployment is a three-node cluster", composePath, len(nodes))
	}
	names := map[string]string{}
	var clusterName string
	clientPort := 0
	for _, n := range nodes {
		where := fmt.Sprintf("%s: service %s", composePath, n.name)
		if img := str(dig(n.m, "image")); img != "nats:"+d.natsVersion+"-alpine" && img != "nats:"+d.natsVersion {
			p.addf("%s: image %s; go.mod pins nats-server v%s, which the tests run (nats:%s-alpine)", where, img, d.natsVersion, d.natsVersion)
		}
		for _, v := range d.passwordVars {
			if _, ok := n.env()[v]; !ok {
				p.addf("%s: no %s in its environment; %s reads it", where, v, accountsPath)
			}
		}
		binds, named := n.mounts()
		for _, b := range binds {
			if _, err := os.Stat(filepath.Join(d.root, "deploy", b[0])); err != nil {
				p.addf("%s: mounts %s, which does not exist in deploy/", where, b[0])
			}
		}
		if n.opts == nil {
			continue
		}
		o := n.opts
		if prev, dup := names[o.ServerName]; dup || o.ServerName == "" {
			p.addf("%s: server name %q, the same as %s's: every node needs its own", where, o.ServerName, prev)
		}
		names[o.ServerName] = n.name
		if o.Cluster.Name == "" {
			p.addf("%s: no cluster name", where)
		} else if clusterName != "" && o.Cluster.Name != clusterName {
			p.addf("%s: cluster name %s, another node's is %s", where, o.Cluster.Name, clusterName)
		}
		clusterName = o.Cluster.Name
		var routes []string
		for _, r := range o.Routes {
			routes = append(routes, r.Hostname())
			if r.Port() != strconv.Itoa(o.Cluster.Port) {
				p.addf("%s: route %s: the nodes' cluster port is %d", where, r, o.Cluster.Port)
			}
		}
		var nodeNames []string
		for _, m := range nodes {
			nodeNames = append(nodeNames, m.name)
		}
		sort.Strings(routes)
		if !slices.Equal(routes, nodeNames) {
			p.addf("%s: routes to %v; the NATS services are %v", where, routes, nodeNames)
		}
		if !o.JetStream {
			p.addf("%s: JetStream is off", where)
		}
		if !slices.ContainsFunc(named, func(v [2]string) bool { return v[1] == o.StoreDir }) {
			p.addf("%s: no named volume at the JetStream store_dir %s: its data would go with the container", where, o.StoreDir)
		}
		for _, v := range named {
			if _, ok := volumes[v[0]]; !ok {
				p.addf("%s: volume %s is not declared under volumes", where, v[0])
			}
		}
		hc := asList(dig(n.m, "healthcheck", "test"))
		u, err := url.Parse(str(lastOf(hc)))
		if err != nil || u.Port() != strconv.Itoa(o.HTTPPort) || u.Path != "/healthz" {
			p.addf("%s: healthcheck %v: the node's monitoring port is %d, its health /healthz", where, hc, o.HTTPPort)
		}
		clientPort = o.Port
	}

	// The compactor roles, and the admin's provision.
	var img string
	roles := map[string]int{} // role → processes
	policies := map[string]map[string]string{}
	streams := map[string]jetstream.Config{} // by service
	var provisions []string
	for _, s := range services {
		if dig(s.m, "build") == nil {
			continue
		}
		where := fmt.Sprintf("%s: service %s", composePath, s.name)
		kind := kindOf(argsOf(dig(s.m, "command")))
		oneShot := kind == provisionProcess
		if oneShot {
			provisions = append(provisions, s.name)
		}
		ctx := str(dig(s.m, "build", "context"))
		df := str(dig(s.m, "build", "dockerfile"))
		if df == "" {
			df = "Dockerfile"
		}
		if filepath.Clean(filepath.Join(d.root, "deploy", ctx, df)) != filepath.Clean(filepath.Join(d.root, dockerfilePath)) {
			p.addf("%s: builds %s in %s, not the repository's %s", where, df, ctx, dockerfilePath)
		}
		if i := str(dig(s.m, "image")); img != "" && i != img {
			p.addf("%s: image %s, other roles run %s", where, i, img)
		} else {
			img = i
		}
		if dig(s.m, "entrypoint") != nil {
			p.addf("%s: overrides the image's entrypoint", where)
		}
		if c := argsOf(dig(s.m, "command")); kind == serveProcess && !slices.Equal(c, serveArgs) {
			p.addf("%s: command %v; the roles run serve, the proxy proxy, the admin's one-shot provision", where, c)
		}
		restart := str(dig(s.m, "restart"))
		switch {
		case oneShot && restart != "no":
			p.addf("%s: restart %q: provision is a one-shot that exits once done; it must not be started again (restart: \"no\")", where, restart)
		case oneShot && s.replicas() != 1:
			p.addf("%s: %d replicas of provision; one provisions", where, s.replicas())
		case !oneShot && restart != "unless-stopped" && restart != "always":
			p.addf("%s: restart %q: a role that stops is started again (unless-stopped)", where, restart)
		}
		if dig(s.m, "read_only") != true {
			p.addf("%s: read_only is not true", where)
		}
		if !slices.Contains(asList(dig(s.m, "cap_drop")), any("ALL")) {
			p.addf("%s: cap_drop does not drop ALL", where)
		}
		if !slices.Contains(asList(dig(s.m, "security_opt")), any("no-new-privileges:true")) {
			p.addf("%s: security_opt lacks no-new-privileges:true", where)
		}
		for _, n := range nodes {
			if str(dig(s.m, "depends_on", n.name, "condition")) != "service_healthy" {
				p.addf("%s: does not wait for %s to be healthy (depends_on condition service_healthy)", where, n.name)
			}
		}
		vars := s.env()
		for _, k := range secretVariables {
			if raw := s.rawEnv(k); raw != "" && !strings.Contains(raw, "${") {
				p.addf("%s: %s is written in the file: take it from the host's environment (${…})", where, k)
			}
		}
		e, ok := d.checkProcessEnv(p, where, vars, validate, kind)
		if !ok {
			continue
		}
		if kind == proxyProcess {
			d.checkComposeProxy(p, where, s, vars, exposed)
		}
		streams[s.name] = streamSettings(e)
		if u, ok := d.accounts[e.NATSUser]; ok {
			if raw := s.rawEnv("COMPACTOR_NATS_PASSWORD"); !strings.HasPrefix(raw, "${"+u.passwordVar) {
				p.addf("%s: COMPACTOR_NATS_PASSWORD is %q; user %s's password is ${%s}, which the NATS nodes get", where, raw, e.NATSUser, u.passwordVar)
			}
		}
		for _, h := range strings.Split(e.NATSURL, ",") {
			u, err := url.Parse(strings.TrimSpace(h))
			if err != nil || u.Port() != strconv.Itoa(clientPort) || !slices.ContainsFunc(nodes, func(n composeNode) bool { return n.name == u.Hostname() }) {
				p.addf("%s: COMPACTOR_NATS_URL server %s is not a NATS service at its client port %d", where, h, clientPort)
			}
		}
		if e.Replicas != len(nodes) {
			p.addf("%s: COMPACTOR_REPLICAS=%d on a cluster of %d nodes", where, e.Replicas, len(nodes))
		}
		if oneShot {
			roles[adminUser] += s.replicas()
			continue // no drain, no listener, no conversations
		}
		grace := 10 * time.Second // Compose's default
		if g := str(dig(s.m, "stop_grace_period")); g != "" {
			var err error
			if grace, err = time.ParseDuration(g); err != nil {
				p.addf("%s: stop_grace_period %q: %v", where, g, err)
			}
		}
		if grace <= e.DrainTimeout {
			p.addf("%s: stop_grace_period %s is not longer than COMPACTOR_DRAIN_TIMEOUT %s: the drain is killed", where, grace, e.DrainTimeout)
		}
		if !exposed[httpPort(e)] {
			p.addf("%s: COMPACTOR_HTTP_LISTEN's port %d is not EXPOSEd by %s", where, httpPort(e), dockerfilePath)
		}
		role := e.Roles
		if e.NATSUser == adminUser {
			role = adminUser
		}
		if kind == proxyProcess {
			role = proxyRole
		}
		roles[role] += s.replicas()
		policies[s.name] = conversationPolicy(e)
	}
	for role, want := range map[string]int{adminUser: 1, "trigger": 1, "worker": 2, "api": 1, proxyRole: 1} {
		if roles[role] < want {
			p.addf("%s: %d processes run as %s; the deployment has at least %d", composePath, roles[role], role, want)
		}
	}
	if len(provisions) != 1 {
		p.addf("%s: services %v run compactor provision; the deployment has one, the admin's", composePath, provisions)
	}
	for _, prov := range provisions {
		for _, s := range services {
			if dig(s.m, "build") == nil || slices.Contains(provisions, s.name) {
				continue
			}
			if c := str(dig(s.m, "depends_on", prov, "condition")); c != "service_completed_successfully" {
				p.addf("%s: service %s does not wait for %s to exit 0 (depends_on condition service_completed_successfully, not %q)",
					composePath, s.name, prov, c)
			}
			if st, ok := streams[s.name]; ok && hasKey(streams, prov) && !reflect.DeepEqual(st, streams[prov]) {
				p.addf("%s: service %s checks the streams for other settings than %s creates them with (%+v, %+v): it would refuse to start",
					composePath, s.name, prov, st, streams[prov])
			}
		}
	}
	var first string
	for _, name := range slices.Sorted(maps.Keys(policies)) {
		if first == "" {
			first = name
		} else if !maps.Equal(policies[name], policies[first]) {
			p.addf("%s: services %s and %s compact conversations with different policy settings (%v, %v)", composePath, first, name, policies[first], policies[name])
		}
	}
}

func hasKey[V any](m map[string]V, k string) bool { _, ok := m[k]; return ok }

// checkComposeProxy checks that the agents reach the proxy service: its port is
// published (on the host's loopback: it takes the agents' keys) and EXPOSEd by the image.
func (d *deployment) checkComposeProxy(p *problems, where string, s composeService, vars map[string]string, exposed map[int]bool) {
	port := proxyPort(vars)
	if !exposed[port] {
		p.addf("%s: %s's port %d is not EXPOSEd by %s", where, proxyListenVar, port, dockerfilePath)
	}
	published := false
	for _, pt := range asList(dig(s.m, "ports")) {
		parts := strings.Split(scalar(pt), ":")
		if len(parts) == 3 && parts[2] == strconv.Itoa(port) {
			published = true
			if parts[0] != "127.0.0.1" {
				p.addf("%s: publishes the proxy on %s: keep it on the host's loopback (127.0.0.1), or put TLS in front of it", where, scalar(pt))
			}
		}
	}
	if !published {
		p.addf("%s: the proxy's port %d (%s) is not published (ports: 127.0.0.1:%d:%d)", where, port, proxyListenVar, port, port)
	}
}

// --- Kubernetes ---

// kubeContainer is a container of a workload, with its resolved environment.
type kubeContainer struct {
	doc  kubeDoc
	spec map[string]any // the pod spec
	c    map[string]any
	vars map[string]string
	// fromSecret maps variables given from a Secret to "<name>/<key>".
	fromSecret map[string]string
}

func (k kubeContainer) where() string {
	return fmt.Sprintf("%s: %s %s container %s", k.doc.file, k.doc.kind(), k.doc.name(), str(k.c["name"]))
}

// port resolves a probe's port (a number or a container port's name).
func (k kubeContainer) port(v any) int {
	if n, ok := v.(int); ok {
		return n
	}
	for _, cp := range asList(k.c["ports"]) {
		if str(dig(cp, "name")) == str(v) {
			n, _ := dig(cp, "containerPort").(int)
			return n
		}
	}
	return -1
}

func (d *deployment) kubeFind(kind, name string) map[string]any {
	for _, doc := range d.kube {
		if doc.kind() == kind && doc.name() == name {
			return doc.obj
		}
	}
	return nil
}

// kubeContainers lists the containers of every workload, with their variables.
func (d *deployment) kubeContainers(p *problems) []kubeContainer {
	var out []kubeContainer
	for _, doc := range d.kube {
		if doc.kind() != "Deployment" && doc.kind() != "StatefulSet" && doc.kind() != "Job" {
			continue
		}
		spec := asMap(dig(doc.obj, "spec", "template", "spec"))
		for _, c := range asList(spec["containers"]) {
			k := kubeContainer{doc: doc, spec: spec, c: asMap(c), vars: map[string]string{}, fromSecret: map[string]string{}}
			for _, ef := range asList(k.c["envFrom"]) {
				if name := str(dig(ef, "configMapRef", "name")); name != "" {
					cm := d.kubeFind("ConfigMap", name)
					if cm == nil {
						p.addf("%s: envFrom ConfigMap %s, which no manifest defines", k.where(), name)
					}
					for key, v := range asMap(cm["data"]) {
						k.vars[key] = scalar(v)
					}
				}
				if name := str(dig(ef, "secretRef", "name")); name != "" {
					p.addf("%s: envFrom Secret %s: its variables are named nowhere; give each with env valueFrom secretKeyRef", k.where(), name)
				}
			}
			for _, ev := range asList(k.c["env"]) {
				name := str(dig(ev, "name"))
				switch {
				case dig(ev, "valueFrom", "secretKeyRef") != nil:
					ref := str(dig(ev, "valueFrom", "secretKeyRef", "name")) + "/" + str(dig(ev, "valueFrom", "secretKeyRef", "key"))
					k.vars[name] = "secret:" + ref
					k.fromSecret[name] = ref
				case dig(ev, "valueFrom", "configMapKeyRef") != nil:
					cm := d.kubeFind("ConfigMap", str(dig(ev, "valueFrom", "configMapKeyRef", "name")))
					k.vars[name] = scalar(dig(cm, "data", str(dig(ev, "valueFrom", "configMapKeyRef", "key"))))
				case dig(ev, "valueFrom") != nil:
					// fieldRef, resourceFieldRef: set by Kubernetes.
				default:
					k.vars[name] = scalar(dig(ev, "value"))
				}
			}
			out = append(out, k)
		}
	}
	return out
}

// kubeSelects reports whether a selector's matchLabels select labels.
func kubeSelects(selector, labels any) bool {
	ml := asMap(dig(selector, "matchLabels"))
	if len(ml) == 0 {
		return false
	}
	for k, v := range ml {
		if str(dig(labels, k)) != str(v) {
			return false
		}
	}
	return true
}

// checkKubernetes checks the manifests; it returns the worker Deployment's name and
// its processes' COMPACTOR_WORKERS.
func (d *deployment) checkKubernetes(p *problems, validate envValidator, exposed map[int]bool) kubeWorkers {
	var workers kubeWorkers
	// kustomization.yaml lists every manifest of its directory, and only those.
	var listed []string
	for _, r := range asList(d.kustom["resources"]) {
		listed = append(listed, str(r))
	}
	var present []string
	entries, _ := os.ReadDir(filepath.Join(d.root, kubeDir))
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".yaml") && e.Name() != "kustomization.yaml" {
			present = append(present, e.Name())
		}
	}
	sort.Strings(listed)
	if !slices.Equal(listed, present) {
		p.addf("%s: resources %v; the directory holds %v", kustomizePath, listed, present)
	}
	images := map[string]bool{}
	for _, im := range asList(d.kustom["images"]) {
		images[str(dig(im, "name"))] = true
	}

	helmNS, helmHost := d.helmClientHost()
	uid := d.imageUID()
	roles := map[string]bool{}
	var pods []map[string]any // the compactor pods' labels
	policies := map[string]map[string]string{}
	streams := map[string]jetstream.Config{} // by workload
	var provisions []string
	for _, k := range d.kubeContainers(p) {
		where := k.where()
		job := k.doc.kind() == "Job"
		if !images[str(k.c["image"])] {
			p.addf("%s: image %s is not the one %s sets (%v)", where, str(k.c["image"]), kustomizePath, slices.Sorted(maps.Keys(images)))
		}
		if k.c["command"] != nil {
			p.addf("%s: overrides the image's entrypoint", where)
		}
		args := argsOf(k.c["args"])
		kind := kindOf(args)
		switch {
		case job && !slices.Equal(args, provisionArgs):
			p.addf("%s: args %v; the Job runs the admin's one-shot provision", where, args)
		case !job && kind != proxyProcess && !slices.Equal(args, serveArgs):
			p.addf("%s: args %v; the roles run serve, the proxy proxy (provision is a one-shot: a Job, not a %s, which would restart it forever)", where, args, k.doc.kind())
		}
		if job {
			kind = provisionProcess
		}
		if job {
			provisions = append(provisions, k.doc.name())
		}
		for _, s := range secretVariables {
			if _, ok := k.vars[s]; ok && k.fromSecret[s] == "" {
				p.addf("%s: %s is written in a manifest: give it from a Secret (valueFrom secretKeyRef)", where, s)
			}
		}
		e, ok := d.checkProcessEnv(p, where, k.vars, validate, kind)
		if !ok {
			continue
		}
		role := e.Roles
		if job {
			role = adminUser
		} else {
			policies[k.doc.name()] = conversationPolicy(e)
		}
		if kind == proxyProcess {
			role = proxyRole
			d.checkKubeProxy(p, k, exposed)
		}
		roles[role] = true
		streams[k.doc.name()] = streamSettings(e)
		if want := "compactor-nats-" + e.NATSUser + "/password"; k.fromSecret["COMPACTOR_NATS_PASSWORD"] != want {
			p.addf("%s: COMPACTOR_NATS_PASSWORD from Secret %q; user %s's is %s (README, \"Deploying\", creates it)", where, k.fromSecret["COMPACTOR_NATS_PASSWORD"], e.NATSUser, want)
		}
		if _, ok := k.vars["COMPACTOR_LLM_API_KEY"]; ok && role != "worker" {
			p.addf("%s: has the LLM's key, which only the workers use", where)
		}
		if role == "worker" {
			workers = kubeWorkers{name: k.doc.name(), slots: e.Workers}
		}
		if u, err := url.Parse(e.NATSURL); err != nil || u.Hostname() != helmHost {
			p.addf("%s: COMPACTOR_NATS_URL=%s; the Helm release's client Service is %s (namespace %s)", where, e.NATSURL, helmHost, helmNS)
		} else if u.Port() != strconv.Itoa(d.helmInt(4222, "config", "nats", "port")) {
			p.addf("%s: COMPACTOR_NATS_URL=%s; the Helm values' client port is %d", where, e.NATSURL, d.helmInt(4222, "config", "nats", "port"))
		}
		if r := d.helmInt(0, "config", "cluster", "replicas"); e.Replicas != r {
			p.addf("%s: COMPACTOR_REPLICAS=%d; the Helm values run %d NATS nodes", where, e.Replicas, r)
		}

		if job {
			d.checkJob(p, k)
		} else {
			d.checkServePod(p, k, e, exposed)
		}

		// Resources.
		for _, res := range []string{"cpu", "memory"} {
			req, lim := dig(k.c, "resources", "requests", res), dig(k.c, "resources", "limits", res)
			if req == nil || lim == nil {
				p.addf("%s: resources: %s needs requests and limits", where, res)
				continue
			}
			if quantity(scalar(lim)) < quantity(scalar(req)) || quantity(scalar(req)) <= 0 {
				p.addf("%s: resources: %s limit %v under its request %v", where, res, lim, req)
			}
		}

		// Security.
		sc, psc := asMap(k.c["securityContext"]), asMap(k.spec["securityContext"])
		if dig(psc, "runAsNonRoot") != true && dig(sc, "runAsNonRoot") != true {
			p.addf("%s: runAsNonRoot is not true", where)
		}
		if u, ok := dig(psc, "runAsUser").(int); ok && u != uid {
			p.addf("%s: runAsUser %d; the image's USER is %d", where, u, uid)
		}
		if sc["readOnlyRootFilesystem"] != true {
			p.addf("%s: readOnlyRootFilesystem is not true", where)
		}
		if sc["allowPrivilegeEscalation"] != false {
			p.addf("%s: allowPrivilegeEscalation is not false", where)
		}
		if !slices.Contains(asList(dig(sc, "capabilities", "drop")), any("ALL")) {
			p.addf("%s: capabilities do not drop ALL", where)
		}
		if !job {
			pods = append(pods, asMap(dig(k.doc.obj, "spec", "template", "metadata", "labels")))
		}
	}
	for _, r := range []string{adminUser, "trigger", "worker", "api", proxyRole} {
		if !roles[r] {
			p.addf("%s: no workload runs %s (the roles: a Deployment each; the %s: the provision Job)", kubeDir, r, adminUser)
		}
	}
	if len(provisions) != 1 {
		p.addf("%s: Jobs %v run compactor provision; the deployment has one, the admin's", kubeDir, provisions)
	}
	for _, prov := range provisions {
		for _, name := range slices.Sorted(maps.Keys(streams)) {
			if name != prov && hasKey(streams, prov) && !reflect.DeepEqual(streams[name], streams[prov]) {
				p.addf("%s: %s checks the streams for other settings than %s creates them with (%+v, %+v): it would refuse to start",
					kubeDir, name, prov, streams[name], streams[prov])
			}
		}
	}
	var first string
	for _, name := range slices.Sorted(maps.Keys(policies)) {
		if first == "" {
			first = name
		} else if !maps.Equal(policies[name], policies[first]) {
			p.addf("%s: %s and %s compact conversations with different policy settings", kubeDir, first, name)
		}
	}

	// What selects the pods: disruption budgets, the pod monitor, the network policy.
	selectsSome := func(sel any) bool {
		return slices.ContainsFunc(pods, func(l map[string]any) bool { return kubeSelects(sel, l) })
	}
	hasPort := func(name any) bool {
		for _, k := range d.kubeContainers(&problems{}) {
			if k.port(name) > 0 {
				return true
			}
		}
		return false
	}
	var workerPDB bool
	for _, doc := range d.kube {
		switch doc.kind() {
		case "PodDisruptionBudget":
			sel := dig(doc.obj, "spec", "selector")
			if !selectsSome(sel) {
				p.addf("%s: selects no pod of the Deployments", doc)
			}
			if w := d.kubeFind("Deployment", workers.name); w != nil && kubeSelects(sel, dig(w, "spec", "template", "metadata", "labels")) {
				workerPDB = true
			}
		case "PodMonitor":
			if !selectsSome(dig(doc.obj, "spec", "selector")) {
				p.addf("%s: selects no pod of the Deployments", doc)
			}
			for _, ep := range asList(dig(doc.obj, "spec", "podMetricsEndpoints")) {
				if !hasPort(dig(ep, "port")) || str(dig(ep, "path")) != "/metrics" {
					p.addf("%s: endpoint port %v path %v: the pods serve /metrics on their ops port", doc, dig(ep, "port"), dig(ep, "path"))
				}
			}
		case "NetworkPolicy":
			if !selectsSome(dig(doc.obj, "spec", "podSelector")) {
				p.addf("%s: selects no pod of the Deployments", doc)
			}
			for _, in := range asList(dig(doc.obj, "spec", "ingress")) {
				for _, pt := range asList(dig(in, "ports")) {
					if !hasPort(dig(pt, "port")) {
						p.addf("%s: port %v is no port of the pods", doc, dig(pt, "port"))
					}
				}
			}
		case "Service":
			if !selectsSome(map[string]any{"matchLabels": dig(doc.obj, "spec", "selector")}) {
				p.addf("%s: selects no pod of the Deployments", doc)
			}
			for _, pt := range asList(dig(doc.obj, "spec", "ports")) {
				if !hasPort(dig(pt, "targetPort")) {
					p.addf("%s: targetPort %v is no port of the pods", doc, dig(pt, "targetPort"))
				}
			}
		case "Secret":
			if dig(doc.obj, "data") != nil || dig(doc.obj, "stringData") != nil {
				p.addf("%s: a Secret with values in the repository", doc)
			}
		case "ConfigMap":
			for _, s := range secretVariables {
				if _, ok := asMap(dig(doc.obj, "data"))[s]; ok {
					p.addf("%s: %s is written in a manifest: give it from a Secret (valueFrom secretKeyRef)", doc, s)
				}
			}
		}
	}
	if !workerPDB {
		p.addf("%s: no PodDisruptionBudget selects the workers' pods", kubeDir)
	}
	// The README says how to create the Secrets the Deployments read.
	for _, k := range d.kubeContainers(&problems{}) {
		for _, ref := range k.fromSecret {
			name, _, _ := strings.Cut(ref, "/")
			if !strings.Contains(d.readme, "kubectl create secret generic "+name+" ") {
				p.addf("%s: Secret %s is read, and %s does not say how to create it (kubectl create secret generic %s)", k.where(), name, deployDocPath, name)
			}
		}
	}
	return workers
}

// checkServePod checks what a role's pod needs beyond any compactor pod: probes and
// scrapes on the operators' listener, a grace period longer than its drain, a selector.
func (d *deployment) checkServePod(p *problems, k kubeContainer, e Env, exposed map[int]bool) {
	where := k.where()
	port := httpPort(e)
	// Probes and scrapes on the operators' listener.
	if !exposed[port] {
		p.addf("%s: COMPACTOR_HTTP_LISTEN's port %d is not EXPOSEd by %s", where, port, dockerfilePath)
	}
	for probe, want := range map[string]string{"livenessProbe": "/healthz", "readinessProbe": "/readyz"} {
		pr := dig(k.c, probe, "httpGet")
		if pr == nil {
			p.addf("%s: no %s httpGet", where, probe)
			continue
		}
		if got := str(dig(pr, "path")); got != want {
			kind := strings.TrimSuffix(probe, "Probe")
			p.addf("%s: %s path %s; %s is %s", where, probe, got, kind, want)
		}
		if got := k.port(dig(pr, "port")); got != port {
			p.addf("%s: %s port %v is %d, COMPACTOR_HTTP_LISTEN's port is %d", where, probe, dig(pr, "port"), got, port)
		}
	}
	ann := asMap(dig(k.doc.obj, "spec", "template", "metadata", "annotations"))
	if ann["prometheus.io/scrape"] == "true" {
		if ann["prometheus.io/port"] != strconv.Itoa(port) || ann["prometheus.io/path"] != "/metrics" {
			p.addf("%s: prometheus.io/port %v and path %v; metrics are on %d /metrics", where, ann["prometheus.io/port"], ann["prometheus.io/path"], port)
		}
	}

	grace, ok := k.spec["terminationGracePeriodSeconds"].(int)
	if !ok {
		grace = 30
	}
	if time.Duration(grace)*time.Second <= e.DrainTimeout {
		p.addf("%s: terminationGracePeriodSeconds %d is not longer than COMPACTOR_DRAIN_TIMEOUT %s: the drain is killed", where, grace, e.DrainTimeout)
	}
	if !kubeSelects(dig(k.doc.obj, "spec", "selector"), dig(k.doc.obj, "spec", "template", "metadata", "labels")) {
		p.addf("%s: its selector does not select its pods", where)
	}
}

// checkKubeProxy checks that the agents reach the proxy's pods: a container port at
// COMPACTOR_PROXY_LISTEN's port, EXPOSEd by the image, and a Service that selects the
// pods and sends to that port.
func (d *deployment) checkKubeProxy(p *problems, k kubeContainer, exposed map[int]bool) {
	where := k.where()
	port := proxyPort(k.vars)
	if !exposed[port] {
		p.addf("%s: %s's port %d is not EXPOSEd by %s", where, proxyListenVar, port, dockerfilePath)
	}
	if !slices.ContainsFunc(asList(k.c["ports"]), func(cp any) bool { return dig(cp, "containerPort") == port }) {
		p.addf("%s: no containerPort %d, where the proxy listens (%s)", where, port, proxyListenVar)
	}
	labels := dig(k.doc.obj, "spec", "template", "metadata", "labels")
	for _, doc := range d.kube {
		if doc.kind() != "Service" || !kubeSelects(map[string]any{"matchLabels": dig(doc.obj, "spec", "selector")}, labels) {
			continue
		}
		for _, pt := range asList(dig(doc.obj, "spec", "ports")) {
			if k.port(dig(pt, "targetPort")) == port {
				return
			}
		}
	}
	p.addf("%s: no Service selects its pods with a targetPort at the proxy's port %d: the agents cannot reach it", where, port)
}

// checkJob checks the provision Job: it runs once (a failed run retried a bounded number
// of times), is cleaned up once finished, and has no probes (no listener to probe).
func (d *deployment) checkJob(p *problems, k kubeContainer) {
	where := k.where()
	if rp := str(k.spec["restartPolicy"]); rp != "OnFailure" && rp != "Never" {
		p.addf("%s: restartPolicy %q: a Job's pods restart OnFailure (or Never)", where, rp)
	}
	if _, ok := dig(k.doc.obj, "spec", "backoffLimit").(int); !ok {
		p.addf("%s: no spec.backoffLimit: how often a failed provision is retried", where)
	}
	if _, ok := dig(k.doc.obj, "spec", "ttlSecondsAfterFinished").(int); !ok {
		p.addf("%s: no spec.ttlSecondsAfterFinished: the finished Job stays, and the next apply cannot change it", where)
	}
	for _, probe := range []string{"livenessProbe", "readinessProbe", "startupProbe"} {
		if k.c[probe] != nil {
			p.addf("%s: a %s: provision has no listener to probe, and a Job is done when it exits", where, probe)
		}
	}
}

type kubeWorkers struct {
	name  string
	slots int
}

// quantity reads a Kubernetes quantity (100m, 1, 512Mi, 1G) in base units.
func quantity(s string) float64 {
	units := []struct {
		suffix string
		mult   float64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40}, {"m", 1e-3}, {"k", 1e3}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}}
	for _, u := range units {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			f, err := strconv.ParseFloat(n, 64)
			if err != nil {
				return -1
			}
			return f * u.mult
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return -1
	}
	return f
}

// --- Helm and KEDA ---

// helmNamespace is where the README's helm command installs the NATS release.
const helmNamespace = "nats"

func (d *deployment) helmFullname() string {
	if n := str(dig(d.helm, "fullnameOverride")); n != "" {
		return n
	}
	return "nats"
}

// helmClientHost is the DNS name of the chart's client Service.
func (d *deployment) helmClientHost() (ns, host string) {
	return helmNamespace, fmt.Sprintf("%s.%s.svc.cluster.local", d.helmFullname(), helmNamespace)
}

func (d *deployment) helmInt(def int, keys ...string) int {
	if n, ok := dig(d.helm, keys...).(int); ok {
		return n
	}
	return def
}

func (d *deployment) checkHelm(p *problems) {
	where := helmValuesPath
	if d.helm == nil {
		return
	}
	if dig(d.helm, "config", "cluster", "enabled") != true {
		p.addf("%s: config.cluster.enabled is not true", where)
	}
	if r := d.helmInt(0, "config", "cluster", "replicas"); r < 3 {
		p.addf("%s: config.cluster.replicas %d: a JetStream cluster that survives a node needs 3", where, r)
	}
	if dig(d.helm, "config", "jetstream", "enabled") != true {
		p.addf("%s: config.jetstream.enabled is not true", where)
	}
	if dig(d.helm, "config", "jetstream", "fileStore", "enabled") == false || dig(d.helm, "config", "jetstream", "fileStore", "pvc", "enabled") == false {
		p.addf("%s: the JetStream fileStore or its PVC is off: the data would go with the pod", where)
	}
	if dig(d.helm, "config", "jetstream", "memoryStore", "enabled") != true {
		p.addf("%s: the JetStream memoryStore is off: a partitioned trigger's members bucket (%s) is in memory", where, jetstream.DefaultConfig().Names.TriggersBucket)
	}
	if dig(d.helm, "config", "monitor", "enabled") == false {
		p.addf("%s: config.monitor is off: KEDA's nats-jetstream scaler reads the monitoring port", where)
	}
	if tag := str(dig(d.helm, "container", "image", "tag")); tag != d.natsVersion+"-alpine" && tag != d.natsVersion {
		p.addf("%s: container.image.tag %s; go.mod pins nats-server v%s, which the tests run", where, tag, d.natsVersion)
	}
	// accounts.conf is included first, so that the chart's jetstream block wins.
	var include string
	for k, v := range asMap(dig(d.helm, "config", "merge")) {
		if strings.HasSuffix(k, "$include") && str(v) == path.Base(accountsPath) {
			include = k
		}
	}
	if include == "" {
		p.addf("%s: config.merge does not $include %s", where, path.Base(accountsPath))
	} else if include > "jetstream" {
		p.addf("%s: config.merge.%s sorts after the chart's own keys: accounts.conf's bare jetstream block would replace the chart's", where, include)
	}
	flag := "configMap.merge.data.accounts\\.conf=" + accountsPath
	if !strings.Contains(d.readme, flag) {
		p.addf("%s: does not pass the file to the chart (--set-file '%s')", deployDocPath, flag)
	}
	if !strings.Contains(d.readme, "--namespace "+helmNamespace+" ") {
		p.addf("%s: does not install the chart into namespace %s, where the manifests look for it", deployDocPath, helmNamespace)
	}
	env := asMap(dig(d.helm, "container", "env"))
	secrets := map[string]bool{}
	for _, v := range d.passwordVars {
		ref := dig(env[v], "valueFrom", "secretKeyRef")
		if ref == nil {
			p.addf("%s: container.env has no %s from a Secret; %s reads it", where, v, accountsPath)
			continue
		}
		secrets[str(dig(ref, "name"))] = true
	}
	for name := range secrets {
		if !strings.Contains(d.readme, "kubectl create secret generic "+name+" ") {
			p.addf("%s: Secret %s is read, and %s does not say how to create it", where, name, deployDocPath)
		}
	}
}

func (d *deployment) checkKEDA(p *problems, workers kubeWorkers) {
	cfg := jetstream.DefaultConfig()
	var found bool
	for _, doc := range d.kube {
		if doc.kind() != "ScaledObject" {
			continue
		}
		found = true
		if target := str(dig(doc.obj, "spec", "scaleTargetRef", "name")); target != workers.name {
			p.addf("%s: scaleTargetRef %s; the workers' Deployment is %s", doc, target, workers.name)
		}
		triggers := asList(dig(doc.obj, "spec", "triggers"))
		if len(triggers) != 1 || str(dig(triggers[0], "type")) != "nats-jetstream" {
			p.addf("%s: wants one trigger, of type nats-jetstream", doc)
			continue
		}
		m := asMap(dig(triggers[0], "metadata"))
		if s := str(m["stream"]); s != cfg.Names.RequestsStream {
			p.addf("%s: stream %s; the work queue is %s", doc, s, cfg.Names.RequestsStream)
		}
		if c := str(m["consumer"]); c != cfg.Names.WorkerConsumer {
			p.addf("%s: consumer %s; the workers' consumer is %s", doc, c, cfg.Names.WorkerConsumer)
		}
		if u, ok := d.accounts["worker"]; !ok || str(m["account"]) != u.account {
			p.addf("%s: account %s; the streams are in account %s of %s", doc, str(m["account"]), u.account, accountsPath)
		}
		if n, err := strconv.Atoi(str(m["lagThreshold"])); err != nil || n != workers.slots {
			p.addf("%s: lagThreshold %v; a worker pod takes on %d requests at once (COMPACTOR_WORKERS)", doc, m["lagThreshold"], workers.slots)
		}
		want := fmt.Sprintf("%s-headless.%s.svc.cluster.local:%d", d.helmFullname(), helmNamespace, d.helmInt(8222, "config", "monitor", "port"))
		if got := str(m["natsServerMonitoringEndpoint"]); got != want {
			p.addf("%s: natsServerMonitoringEndpoint %s; the scaler asks each node through the chart's headless Service and monitoring port: %s", doc, got, want)
		}
	}
	if !found {
		p.addf("%s: no KEDA ScaledObject", kubeDir)
	}
}

// --- YAML helpers ---

func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func asMap(v any) map[string]any { m, _ := v.(map[string]any); return m }
func asList(v any) []any         { l, _ := v.([]any); return l }
func str(v any) string           { s, _ := v.(string); return s }

func lastOf(l []any) any {
	if len(l) == 0 {
		return nil
	}
	return l[len(l)-1]
}

// scalar is a YAML scalar as the string an environment variable would hold.
func scalar(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	default:
		return fmt.Sprint(x)
	}
}

// --- the tests ---

// TestDeployManifestsMatchTheCode checks every deployment file against the code and
// against each other (the checks above).
func TestDeployManifestsMatchTheCode(t *testing.T) {
	p := problems{}
	d := loadDeployment(repoRoot, nil, &p)
	p = append(p, checkDeployment(d, validateProcessEnv)...)
	for _, s := range p {
		t.Error(s)
	}
	if len(d.kube) == 0 || d.compose == nil || d.helm == nil {
		t.Fatal("the deployment files were not read")
	}
}

// deployCopy copies what the checks read into a directory of its own.
func deployCopy(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	for _, rel := range []string{"go.mod", dockerfilePath, dockerignorePath, deployDocPath} {
		copyFile(t, filepath.Join(repoRoot, rel), filepath.Join(dst, rel))
	}
	err := filepath.WalkDir(filepath.Join(repoRoot, "deploy"), func(pth string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, pth)
		if e.IsDir() {
			if filepath.ToSlash(rel) == "deploy/examples" {
				return filepath.SkipDir
			}
			return nil
		}
		copyFile(t, pth, filepath.Join(dst, rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Every check can fail: each case breaks one thing in a copy of the files, and the
// checks must name it. (A check that cannot fail would pass here on a broken file.)
func TestDeployChecksCatchBrokenManifests(t *testing.T) {
	type edit struct{ old, new string }
	tests := []struct {
		name  string
		file  string
		edits []edit
		want  string // in one of the problems
	}{
		{"builder not go.mod's Go", dockerfilePath, []edit{{"FROM golang:1.26 AS build", "FROM golang:1.25 AS build"}}, "go.mod wants go"},
		{"build without -trimpath", dockerfilePath, []edit{{"go build -trimpath ", "go build "}}, "-trimpath"},
		{"build not stripped", dockerfilePath, []edit{{`-ldflags "-s -w `, `-ldflags "-w `}}, "lack -s and -w"},
		{"build with cgo", dockerfilePath, []edit{{"CGO_ENABLED=0 go build", "go build"}}, "CGO_ENABLED=0"},
		{"builds another package", dockerfilePath, []edit{{"./cmd/compactor\n", "./cmd/compactor/bench\n"}}, "not ./cmd/compactor"},
		{"entrypoint elsewhere", dockerfilePath, []edit{{`ENTRYPOINT ["/usr/local/bin/compactor"]`, `ENTRYPOINT ["/usr/bin/compactor"]`}}, "ENTRYPOINT runs"},
		{"runs as root", dockerfilePath, []edit{{"USER 65532:65532", "USER 0"}}, "non-root user"},
		{"user by name", dockerfilePath, []edit{{"USER 65532:65532", "USER nonroot"}}, "numeric non-root"},
		{"ops port not exposed", dockerfilePath, []edit{{"EXPOSE 9090 4222", "EXPOSE 4222"}}, "not EXPOSEd"},
		{"big final stage", dockerfilePath, []edit{{"FROM gcr.io/distroless/static-debian12:nonroot", "FROM debian:12"}}, "final stage is FROM"},
		{"one stage", dockerfilePath, []edit{{"FROM gcr.io/distroless/static-debian12:nonroot", ""}}, "stages"},
		{"context without code", dockerignorePath, []edit{{"docs\n", "docs\ncmd\n"}}, "out of the build context"},

		{"unknown role", composePath, []edit{{"COMPACTOR_ROLES: worker", "COMPACTOR_ROLES: workers"}}, "unknown role"},
		{"two roles in one process", composePath, []edit{{"COMPACTOR_ROLES: trigger", "COMPACTOR_ROLES: trigger,api"}}, "one role per process"},
		{"unknown variable", composePath, []edit{{`COMPACTOR_WORKERS: "8"`, `COMPACTOR_WORKER: "8"`}}, "COMPACTOR_WORKER is not a variable"},
		{"invalid value", composePath, []edit{{`COMPACTOR_WORKERS: "8"`, `COMPACTOR_WORKERS: "eight"`}}, "WORKERS"},
		{"one worker", composePath, []edit{{"replicas: 2", "replicas: 1"}}, "run as worker"},
		{"depends on a missing service", composePath, []edit{{"nats-3: {condition: service_healthy}", "nats-4: {condition: service_healthy}"}}, "nats-4, which is not a service"},
		{"does not wait for NATS", composePath, []edit{{"nats-2: {condition: service_healthy}", "nats-2: {condition: service_started}"}}, "to be healthy"},
		{"data not on a volume", composePath, []edit{{"nats-2-data:/data", "nats-2-data:/var/data"}}, "store_dir"},
		{"undeclared volume", composePath, []edit{{"  nats-3-data:\n", ""}}, "not declared"},
		{"two nodes with one name", composePath, []edit{{"NATS_SERVER_NAME: nats-3", "NATS_SERVER_NAME: nats-2"}}, "server name"},
		{"password of another user", composePath, []edit{{"COMPACTOR_NATS_PASSWORD: ${NATS_TRIGGER_PASSWORD:-compose-trigger}", "COMPACTOR_NATS_PASSWORD: ${NATS_WORKER_PASSWORD:-compose-worker}"}}, "password is ${NATS_TRIGGER_PASSWORD}"},
		{"password in the file", composePath, []edit{{"COMPACTOR_NATS_PASSWORD: ${NATS_API_PASSWORD:-compose-api}", "COMPACTOR_NATS_PASSWORD: compose-api"}}, "written in the file"},
		{"inbox of another user", composePath, []edit{{"COMPACTOR_NATS_INBOX_PREFIX: _INBOX_api", "COMPACTOR_NATS_INBOX_PREFIX: _INBOX_worker"}}, "COMPACTOR_NATS_INBOX_PREFIX"},
		{"role as another user", composePath, []edit{{"COMPACTOR_NATS_USER: trigger", "COMPACTOR_NATS_USER: worker"}}, "each role connects as the user"},
		{"unknown user", composePath, []edit{{"COMPACTOR_NATS_USER: api", "COMPACTOR_NATS_USER: apis"}}, "not a user of"},
		{"short stop grace", composePath, []edit{{"stop_grace_period: 200s", "stop_grace_period: 60s"}}, "stop_grace_period"},
		{"writable root", composePath, []edit{{"read_only: true", "read_only: false"}}, "read_only"},
		{"capabilities kept", composePath, []edit{{"cap_drop: [ALL]", "cap_drop: [NET_RAW]"}}, "cap_drop"},
		{"another NATS version", composePath, []edit{{"image: nats:2.15.2-alpine", "image: nats:2.10.0-alpine"}}, "go.mod pins"},
		{"mounts a missing file", composePath, []edit{{"- ./nats/accounts.conf:/etc/nats/accounts.conf:ro\n      - nats-2-data", "- ./nats/account.conf:/etc/nats/accounts.conf:ro\n      - nats-2-data"}}, "does not exist"},
		{"include not mounted", composePath, []edit{{"- ./nats/accounts.conf:/etc/nats/accounts.conf:ro\n      - nats-3-data", "- nats-3-data"}}, "not mounted"},
		{"wrong client port", composePath, []edit{{"nats://nats-3:4222", "nats://nats-3:4223"}}, "client port"},
		{"a password the servers lack", composePath, []edit{{"  NATS_READER_PASSWORD: ${NATS_READER_PASSWORD:-compose-reader}\n", ""}}, "no NATS_READER_PASSWORD"},
		{"healthcheck on the wrong port", composePath, []edit{{"http://127.0.0.1:8222/healthz", "http://127.0.0.1:8223/healthz"}}, "healthcheck"},
		{"policies differ", composePath, []edit{{"      COMPACTOR_ROLES: trigger\n", "      COMPACTOR_ROLES: trigger\n      COMPACTOR_THRESHOLD: \"0.6\"\n"}}, "different policy settings"},
		{"provision restarts", composePath, []edit{{`restart: "no"`, `restart: unless-stopped`}}, "must not be started again"},
		{"provision runs serve", composePath, []edit{{`command: ["provision"]`, `command: ["serve"]`}}, "run compactor provision; the deployment has one"},
		{"provision as a role's user", composePath, []edit{{"COMPACTOR_NATS_USER: admin", "COMPACTOR_NATS_USER: api"}}, "only admin may create the streams"},
		{"a role as the admin", composePath, []edit{{"COMPACTOR_NATS_USER: trigger\n      COMPACTOR_NATS_PASSWORD: ${NATS_TRIGGER_PASSWORD:-compose-trigger}\n      COMPACTOR_NATS_INBOX_PREFIX: _INBOX_trigger",
			"COMPACTOR_NATS_USER: admin\n      COMPACTOR_NATS_PASSWORD: ${NATS_ADMIN_PASSWORD:-compose-admin}\n      COMPACTOR_NATS_INBOX_PREFIX: _INBOX_admin"}}, "only the provision one-shot needs the admin's rights"},
		{"roles do not wait for provision", composePath, []edit{{"provision: {condition: service_completed_successfully}", "provision: {condition: service_started}"}}, "to exit 0"},
		{"provision with other stream settings", composePath, []edit{{"      COMPACTOR_NATS_USER: admin\n", "      COMPACTOR_NATS_USER: admin\n      COMPACTOR_CHAT_MAX_AGE: 720h\n"}}, "other settings than provision creates them with"},
		{"listener on localhost", composePath, []edit{{"COMPACTOR_HTTP_LISTEN: 0.0.0.0:9090", "COMPACTOR_HTTP_LISTEN: 127.0.0.1:9090"}}, "cannot be reached"},
		{"proxy as another user", composePath, []edit{{"COMPACTOR_NATS_USER: proxy", "COMPACTOR_NATS_USER: producer"}}, "each role connects as the user"},
		{"no proxy", composePath, []edit{{`command: ["proxy"]`, `command: ["serve"]`}}, "processes run as proxy"},
		{"proxy beside a role", composePath, []edit{{"      COMPACTOR_ROLES: trigger\n", "      COMPACTOR_ROLES: trigger\n      COMPACTOR_PROXY_LISTEN: 0.0.0.0:8088\n"}}, "runs the proxy beside role trigger"},
		{"proxy on localhost", composePath, []edit{{"COMPACTOR_PROXY_LISTEN: 0.0.0.0:8088", "COMPACTOR_PROXY_LISTEN: 127.0.0.1:8088"}}, "cannot reach the proxy"},
		{"proxy on the ops port", composePath, []edit{{"COMPACTOR_PROXY_LISTEN: 0.0.0.0:8088", "COMPACTOR_PROXY_LISTEN: 0.0.0.0:9090"}}, "the same port as COMPACTOR_HTTP_LISTEN"},
		{"proxy not published", composePath, []edit{{`    ports: ["127.0.0.1:8088:8088"]` + "\n", ""}}, "is not published"},
		{"proxy published on every address", composePath, []edit{{`"127.0.0.1:8088:8088"`, `"0.0.0.0:8088:8088"`}}, "host's loopback"},
		{"proxy's owner key in the file", composePath, []edit{{"COMPACTOR_PROXY_OWNER_KEY: ${COMPACTOR_PROXY_OWNER_KEY:-}", "COMPACTOR_PROXY_OWNER_KEY: an-owner-key-in-the-file"}}, "written in the file"},
		{"proxy port not exposed", dockerfilePath, []edit{{"EXPOSE 9090 4222 8088", "EXPOSE 9090 4222"}}, "COMPACTOR_PROXY_LISTEN's port 8088 is not EXPOSEd"},

		{"route to a missing node", "deploy/nats/cluster.conf", []edit{{"nats-route://nats-3:6222", "nats-route://nats-4:6222"}}, "routes to"},
		{"route to the wrong port", "deploy/nats/cluster.conf", []edit{{"nats-route://nats-3:6222", "nats-route://nats-3:7222"}}, "cluster port"},
		{"no cluster name", "deploy/nats/cluster.conf", []edit{{"  name: compactor\n", ""}}, "no cluster name"},
		{"include of a missing file", "deploy/nats/cluster.conf", []edit{{"include ./accounts.conf", "include ./users.conf"}}, "users.conf"},
		{"accounts included last", "deploy/nats/cluster.conf", []edit{{"include ./accounts.conf\n", ""}, {"  ]\n}\n", "  ]\n}\ninclude ./accounts.conf\n"}}, "store_dir"},
		{"user renamed", accountsPath, []edit{{"user: worker,", "user: workers,"}}, "not a user of"},
		{"inbox not allowed", accountsPath, []edit{{`"_INBOX_api.>"`, `"_INBOX.>"`}}, "subscribe to _INBOX_api.>"},

		{"readiness on /healthz", "deploy/kubernetes/worker.yaml", []edit{{"path: /readyz", "path: /healthz"}}, "readiness is /readyz"},
		{"liveness on /readyz", "deploy/kubernetes/trigger.yaml", []edit{{"path: /healthz", "path: /readyz"}}, "liveness is /healthz"},
		{"probe on another port", "deploy/kubernetes/api.yaml", []edit{{"port: ops", "port: 9091"}}, "COMPACTOR_HTTP_LISTEN's port is 9090"},
		{"listener on localhost (Kubernetes)", "deploy/kubernetes/config.yaml", []edit{{"COMPACTOR_HTTP_LISTEN: 0.0.0.0:9090", "COMPACTOR_HTTP_LISTEN: 127.0.0.1:9090"}}, "cannot be reached"},
		{"two roles in a pod", "deploy/kubernetes/worker.yaml", []edit{{"value: worker\n            - name: COMPACTOR_WORKERS", "value: trigger,worker\n            - name: COMPACTOR_WORKERS"}}, "one role per process"},
		{"unknown variable (Kubernetes)", "deploy/kubernetes/config.yaml", []edit{{"COMPACTOR_LOG_FORMAT: json", "COMPACTOR_LOG_FORMATS: json"}}, "COMPACTOR_LOG_FORMATS is not a variable"},
		{"writable root (Kubernetes)", "deploy/kubernetes/worker.yaml", []edit{{"readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false"}}, "readOnlyRootFilesystem"},
		{"capabilities kept (Kubernetes)", "deploy/kubernetes/worker.yaml", []edit{{"drop: [ALL]", "drop: [NET_RAW]"}}, "do not drop ALL"},
		{"escalation allowed", "deploy/kubernetes/api.yaml", []edit{{"allowPrivilegeEscalation: false", "allowPrivilegeEscalation: true"}}, "allowPrivilegeEscalation"},
		{"root allowed", "deploy/kubernetes/trigger.yaml", []edit{{"runAsNonRoot: true", "runAsNonRoot: false"}}, "runAsNonRoot"},
		{"another user than the image's", "deploy/kubernetes/worker.yaml", []edit{{"runAsUser: 65532", "runAsUser: 1000"}}, "the image's USER is 65532"},
		{"no memory limit", "deploy/kubernetes/worker.yaml", []edit{{"limits:\n              cpu: \"1\"\n              memory: 512Mi", "limits:\n              cpu: \"1\""}}, "memory needs requests and limits"},
		{"limit under request", "deploy/kubernetes/api.yaml", []edit{{"cpu: 500m", "cpu: 10m"}}, "under its request"},
		{"grace shorter than the drain", "deploy/kubernetes/worker.yaml", []edit{{"terminationGracePeriodSeconds: 200", "terminationGracePeriodSeconds: 30"}}, "terminationGracePeriodSeconds"},
		{"password of another user (Kubernetes)", "deploy/kubernetes/worker.yaml", []edit{{"name: compactor-nats-worker", "name: compactor-nats-api"}}, "user worker's is compactor-nats-worker/password"},
		{"password in a ConfigMap", "deploy/kubernetes/config.yaml", []edit{{"COMPACTOR_LOG_FORMAT: json", "COMPACTOR_LOG_FORMAT: json\n  COMPACTOR_NATS_PASSWORD: hunter2"}}, "written in a manifest"},
		{"LLM key outside the workers", "deploy/kubernetes/api.yaml", []edit{{"          env:\n", "          env:\n            - name: COMPACTOR_LLM_API_KEY\n              valueFrom:\n                secretKeyRef: {name: compactor-llm, key: api-key}\n"}}, "only the workers use"},
		{"NATS in another namespace", "deploy/kubernetes/config.yaml", []edit{{"nats.nats.svc.cluster.local", "nats.default.svc.cluster.local"}}, "client Service is"},
		{"replicas not the cluster's", "deploy/kubernetes/config.yaml", []edit{{`COMPACTOR_REPLICAS: "3"`, `COMPACTOR_REPLICAS: "1"`}}, "NATS nodes"},
		{"scrape port", "deploy/kubernetes/trigger.yaml", []edit{{`prometheus.io/port: "9090"`, `prometheus.io/port: "9091"`}}, "prometheus.io/port"},
		{"image not kustomized", "deploy/kubernetes/api.yaml", []edit{{"image: compactor\n", "image: compactor-api\n"}}, "is not the one"},
		{"not serve", "deploy/kubernetes/trigger.yaml", []edit{{`args: ["serve"]`, `args: ["status"]`}}, "the roles run serve"},
		{"provision Job restarts always", "deploy/kubernetes/provision.yaml", []edit{{"restartPolicy: OnFailure", "restartPolicy: Always"}}, "restartPolicy"},
		{"provision Job without backoffLimit", "deploy/kubernetes/provision.yaml", []edit{{"  backoffLimit: 6\n", ""}}, "backoffLimit"},
		{"provision Job kept forever", "deploy/kubernetes/provision.yaml", []edit{{"  ttlSecondsAfterFinished: 3600\n", ""}}, "ttlSecondsAfterFinished"},
		{"provision Job runs serve", "deploy/kubernetes/provision.yaml", []edit{{`args: ["provision"]`, `args: ["serve"]`}}, "the Job runs the admin's one-shot provision"},
		{"provision Job with a probe", "deploy/kubernetes/provision.yaml", []edit{{"          resources:\n", "          livenessProbe:\n            httpGet: {path: /healthz, port: 9090}\n          resources:\n"}}, "no listener to probe"},
		{"provision Job with other stream settings", "deploy/kubernetes/provision.yaml", []edit{{"          env:\n", "          env:\n            - name: COMPACTOR_FORGET_TTL\n              value: 48h\n"}}, "other settings than compactor-provision creates them with"},
		{"provision as a Deployment", "deploy/kubernetes/trigger.yaml", []edit{{`args: ["serve"]`, `args: ["provision"]`}}, "a Job, not a Deployment"},
		{"no worker disruption budget", "deploy/kubernetes/worker.yaml", []edit{{"maxUnavailable: 1\n  selector:\n    matchLabels:\n      app.kubernetes.io/name: compactor\n      app.kubernetes.io/component: worker", "maxUnavailable: 1\n  selector:\n    matchLabels:\n      app.kubernetes.io/name: compactor\n      app.kubernetes.io/component: workers"}}, "no PodDisruptionBudget selects the workers"},
		{"pod monitor on a missing port", "deploy/kubernetes/monitoring/podmonitor.yaml", []edit{{"- port: ops", "- port: metrics"}}, "endpoint port"},
		{"manifest not in the kustomization", kustomizePath, []edit{{"  - worker.yaml\n", ""}}, "resources"},
		{"proxy runs serve", "deploy/kubernetes/proxy.yaml", []edit{{`args: ["proxy"]`, `args: ["serve"]`}}, "runs the proxy beside role"},
		{"proxy without its container port", "deploy/kubernetes/proxy.yaml", []edit{{"            - name: proxy\n              containerPort: 8088\n", ""}}, "no containerPort 8088"},
		{"proxy Service to another port", "deploy/kubernetes/proxy.yaml", []edit{{"targetPort: proxy", "targetPort: ops"}}, "no Service selects its pods with a targetPort"},
		{"proxy Service to no port", "deploy/kubernetes/proxy.yaml", []edit{{"targetPort: proxy", "targetPort: http"}}, "targetPort http is no port of the pods"},
		{"proxy Service selects nothing", "deploy/kubernetes/proxy.yaml", []edit{{"    app.kubernetes.io/component: proxy\n  # A replica", "    app.kubernetes.io/component: proxies\n  # A replica"}}, "Service compactor-proxy: selects no pod"},
		{"proxy's password of another user", "deploy/kubernetes/proxy.yaml", []edit{{"name: compactor-nats-proxy", "name: compactor-nats-producer"}}, "user proxy's is compactor-nats-proxy/password"},
		{"proxy's owner key in a manifest", "deploy/kubernetes/proxy.yaml", []edit{{"            - name: COMPACTOR_PROXY_OWNER_KEY\n              valueFrom:\n                secretKeyRef:\n                  name: compactor-proxy\n                  key: owner-key\n",
			"            - name: COMPACTOR_PROXY_OWNER_KEY\n              value: an-owner-key-in-the-manifest\n"}}, "COMPACTOR_PROXY_OWNER_KEY is written in a manifest"},
		{"no proxy Deployment", kustomizePath, []edit{{"  - proxy.yaml\n", ""}}, "resources"},
		{"proxy's Secret not documented", deployDocPath, []edit{{"kubectl create secret generic compactor-proxy ", "kubectl create secret generic compactor-proxies "}}, "Secret compactor-proxy is read"},
		{"Secret not documented", deployDocPath, []edit{{"kubectl create secret generic compactor-nats-worker", "kubectl create secret generic compactor-nats-workers"}}, "does not say how to create it"},

		{"KEDA: another stream", "deploy/kubernetes/keda/scaledobject.yaml", []edit{{"stream: COMPACT_REQUESTS", "stream: COMPACT_REQUEST"}}, "the work queue is COMPACT_REQUESTS"},
		{"KEDA: another consumer", "deploy/kubernetes/keda/scaledobject.yaml", []edit{{"consumer: compactor-workers", "consumer: compactor-worker"}}, "the workers' consumer is compactor-workers"},
		{"KEDA: another account", "deploy/kubernetes/keda/scaledobject.yaml", []edit{{"account: COMPACTOR", "account: $G"}}, "account $G"},
		{"KEDA: threshold not the slots", "deploy/kubernetes/keda/scaledobject.yaml", []edit{{`lagThreshold: "8"`, `lagThreshold: "100"`}}, "lagThreshold"},
		{"KEDA: not the headless service", "deploy/kubernetes/keda/scaledobject.yaml", []edit{{"nats-headless.nats.svc", "nats.nats.svc"}}, "headless"},
		{"KEDA: another target", "deploy/kubernetes/keda/scaledobject.yaml", []edit{{"  scaleTargetRef:\n    name: compactor-worker", "  scaleTargetRef:\n    name: compactor-workers"}}, "scaleTargetRef"},
		{"KEDA: another scaler", "deploy/kubernetes/keda/scaledobject.yaml", []edit{{"type: nats-jetstream", "type: nats-streaming"}}, "nats-jetstream"},

		{"Helm: no cluster", helmValuesPath, []edit{{"  cluster:\n    enabled: true", "  cluster:\n    enabled: false"}}, "config.cluster.enabled"},
		{"Helm: replicas not the streams'", helmValuesPath, []edit{{"replicas: 3", "replicas: 5"}}, "COMPACTOR_REPLICAS=3"},
		{"Helm: no JetStream", helmValuesPath, []edit{{"  jetstream:\n    enabled: true", "  jetstream:\n    enabled: false"}}, "config.jetstream.enabled"},
		{"Helm: no PVC", helmValuesPath, []edit{{"      pvc:\n        enabled: true", "      pvc:\n        enabled: false"}}, "PVC is off"},
		{"Helm: no memory store", helmValuesPath, []edit{{"    memoryStore:\n      enabled: true", "    memoryStore:\n      enabled: false"}}, "memoryStore is off"},
		{"Helm: no monitoring", helmValuesPath, []edit{{"  monitor:\n    enabled: true", "  monitor:\n    enabled: false"}}, "config.monitor is off"},
		{"Helm: include last", helmValuesPath, []edit{{"00$include: accounts.conf", "zz$include: accounts.conf"}}, "sorts after"},
		{"Helm: no include", helmValuesPath, []edit{{"00$include: accounts.conf", "00$include: users.conf"}}, "does not $include"},
		{"Helm: a password the servers lack", helmValuesPath, []edit{{"    NATS_READER_PASSWORD:\n      valueFrom:\n        secretKeyRef: {name: nats-compactor-users, key: reader}\n", ""}}, "no NATS_READER_PASSWORD"},
		{"Helm: another NATS version", helmValuesPath, []edit{{"tag: 2.15.2-alpine", "tag: 2.14.2-alpine"}}, "go.mod pins"},
		{"Helm: another namespace", deployDocPath, []edit{{"helm upgrade --install nats nats/nats --namespace nats ", "helm upgrade --install nats nats/nats --namespace messaging "}}, "into namespace nats"},
		{"Helm: accounts.conf not given", deployDocPath, []edit{{`configMap.merge.data.accounts\.conf=deploy/nats/accounts.conf`, `configMap.merge.data.accounts.conf=deploy/nats/accounts.conf`}}, "--set-file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := deployCopy(t)
			file := filepath.Join(root, tt.file)
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range tt.edits {
				if !bytes.Contains(data, []byte(e.old)) {
					t.Fatalf("%s holds no %q to break", tt.file, e.old)
				}
				data = bytes.Replace(data, []byte(e.old), []byte(e.new), 1)
			}
			if err := os.WriteFile(file, data, 0o644); err != nil {
				t.Fatal(err)
			}
			p := problems{}
			d := loadDeployment(root, nil, &p)
			p = append(p, checkDeployment(d, validateProcessEnv)...)
			if !slices.ContainsFunc(p, func(s string) bool { return strings.Contains(s, tt.want) }) {
				t.Errorf("no problem mentions %q; found:\n%s", tt.want, strings.Join(p, "\n"))
			}
		})
	}
}
