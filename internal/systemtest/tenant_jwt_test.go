package systemtest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/fakellm"
	"github.com/compactor/compactor/internal/node"
	"github.com/compactor/compactor/internal/rolestest"
	"github.com/compactor/compactor/internal/telemetry"
	"github.com/compactor/compactor/jetstream"
)

// The recipe of deploy/nats/nsc-tenants.sh (tenants with NATS in operator mode, JWT
// accounts made with nsc), which cannot run here (no nsc), built as the same JWTs: the
// operator, COMPACTOR's private service exports and users, and per tenant an account
// whose imports carry activation tokens COMPACTOR signed for it. The users, exports and
// imports are read from the script itself, and the script's users are checked against
// tenants.conf's. nats-server runs it as nsc's memory resolver configuration does.

// nscScript is the path of deploy/nats/nsc-tenants.sh.
func nscScript() string {
	return filepath.Join(filepath.Dir(rolestest.TenantsConf()), "nsc-tenants.sh")
}

// nscCommands returns the nsc commands of the script that start with prefix (e.g. "nsc
// add user"), as words (continuation lines joined, quotes removed), and the commands
// of its endpoint loops once per endpoint of its ENDPOINTS ($ep replaced), and the
// import_activated calls likewise when prefix names them.
func nscCommands(t *testing.T, prefix string) [][]string {
	t.Helper()
	data, err := os.ReadFile(nscScript())
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(data), "\\\n", " ")
	var endpoints []string
	var out [][]string
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "ENDPOINTS="); ok {
			endpoints = strings.Fields(strings.Trim(v, `"`))
		}
		if !strings.HasPrefix(line, prefix+" ") {
			continue
		}
		if !strings.Contains(line, "$ep") {
			out = append(out, shellWords(line))
			continue
		}
		if len(endpoints) == 0 {
			t.Fatalf("%s: %q loops over ENDPOINTS before they are set", nscScript(), line)
		}
		for _, ep := range endpoints {
			out = append(out, shellWords(strings.ReplaceAll(line, "$ep", ep)))
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s has no %q: change this test", nscScript(), prefix)
	}
	return out
}

// shellWords splits a line as the shell does for the script's commands: at blanks,
// outside single or double quotes, which are removed (no expansion).
func shellWords(line string) []string {
	var words []string
	var w strings.Builder
	var quote rune
	inWord := false
	for _, r := range line {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			w.WriteRune(r)
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words, inWord = append(words, w.String()), false
				w.Reset()
			}
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words
}

// forTenant is s with the script's tenant variable replaced by tenant.
func forTenant(s, tenant string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "${t}", tenant), "$t", tenant)
}

// nscUser is a user as the script adds it: its account and its permissions.
type nscUser struct {
	account string
	perms   jwt.Permissions
}

// nscUsers returns the script's users, a tenant's once per tenant of tenants.
func nscUsers(t *testing.T, tenants ...string) map[string]nscUser {
	t.Helper()
	users := map[string]nscUser{}
	for _, cmd := range nscCommands(t, "nsc add user") {
		forEach := []string{""}
		// A tenant's user: in the tenant's account ($t), or named after it in
		// COMPACTOR's (${t}-proxy).
		if slices.Contains(cmd, "$t") || slices.ContainsFunc(cmd, func(w string) bool { return strings.Contains(w, "${t}") }) {
			forEach = tenants
		}
		for _, tn := range forEach {
			name, u := nscUserOf(t, cmd, tn)
			users[name] = u
		}
	}
	return users
}

// nscUserOf is the user of an "nsc add user" command's words for tenant.
func nscUserOf(t *testing.T, cmd []string, tenant string) (string, nscUser) {
	t.Helper()
	var name string
	var u nscUser
	for i := 3; i < len(cmd); i++ {
		flag, arg := cmd[i], ""
		if i+1 < len(cmd) {
			arg = forTenant(cmd[i+1], tenant)
		}
		switch flag {
		case "--account":
			u.account = arg
		case "--name":
			name = arg
		case "--allow-pub":
			u.perms.Pub.Allow.Add(arg)
		case "--deny-pub":
			u.perms.Pub.Deny.Add(arg)
		case "--allow-sub":
			u.perms.Sub.Allow.Add(arg)
		case "--allow-pub-response":
			if u.perms.Resp == nil {
				u.perms.Resp = &jwt.ResponsePermission{}
			}
			u.perms.Resp.MaxMsgs = 1
			continue
		case "--response-ttl":
			d, err := time.ParseDuration(arg)
			if err != nil || u.perms.Resp == nil {
				t.Fatalf("%s: nsc add user: --response-ttl %q after --allow-pub-response: %v", nscScript(), arg, err)
			}
			u.perms.Resp.Expires = d
		default:
			t.Fatalf("%s: nsc add user %s: this test does not know %s", nscScript(), strings.Join(cmd[3:], " "), flag)
		}
		i++
	}
	return name, u
}

// The script gives each user the permissions tenants.conf gives it, and no user more.
func TestNscScriptUsersAreTenantsConfs(t *testing.T) {
	for _, u := range rolestest.TenantsConfUsers() {
		t.Setenv(rolestest.PasswordVar(u), "x")
	}
	o, err := server.ProcessConfigFile(rolestest.TenantsConf())
	if err != nil {
		t.Fatal(err)
	}
	script := nscUsers(t, rolestest.Tenants...)
	for _, cu := range o.Users {
		if cu.Username == "sys" {
			continue // nsc add operator --sys makes SYS's
		}
		su, ok := script[cu.Username]
		if !ok {
			t.Errorf("tenants.conf's %s is not in the script", cu.Username)
			continue
		}
		delete(script, cu.Username)
		if su.account != cu.Account.Name {
			t.Errorf("%s: the script's account %s, tenants.conf's %s", cu.Username, su.account, cu.Account.Name)
		}
		samePermissions(t, cu.Username, cu.Permissions, su.perms)
	}
	for name := range script {
		t.Errorf("the script's %s is not in tenants.conf", name)
	}
}

// The script's exports are tenants.conf's (private instead of with an account token
// position), and its imports of each tenant are tenants.conf's, subjects and local
// subjects alike.
func TestNscScriptImportsAreTenantsConfs(t *testing.T) {
	conf, err := os.ReadFile(rolestest.TenantsConf())
	if err != nil {
		t.Fatal(err)
	}
	r := newJWTRecipe(t, rolestest.Tenants...)
	var script []string
	for _, e := range r.exports {
		script = append(script, string(e.Subject))
	}
	confExports := regexp.MustCompile(`\{ service: "([^"]+)", +account_token_position: 2, response_threshold: "([^"]+)" \}`).FindAllStringSubmatch(string(conf), -1)
	sameSubjects(t, "COMPACTOR's exports", confExports, script)
	for i, e := range r.exports {
		if want, err := time.ParseDuration(confExports[min(i, len(confExports)-1)][2]); err != nil || e.ResponseThreshold != want {
			t.Errorf("export %s: the script's response threshold %s, tenants.conf's %s (%v)", e.Subject, e.ResponseThreshold, want, err)
		}
	}
	imports := regexp.MustCompile(`\{ service: \{ account: COMPACTOR, subject: "([^"]+)" \}, +to: "([^"]+)" \}`)
	for _, tn := range rolestest.Tenants {
		script = nil
		for _, im := range r.imports[tn] {
			script = append(script, im.subject+" to "+im.local)
		}
		var confImports [][]string
		for _, m := range imports.FindAllStringSubmatch(string(conf), -1) {
			if strings.Contains(m[1], "."+tn+".") {
				confImports = append(confImports, []string{m[0], m[1] + " to " + m[2]})
			}
		}
		sameSubjects(t, tn+"'s imports", confImports, script)
	}
}

// sameSubjects checks that the script's subjects are the ones of tenants.conf's
// matches (their first group).
func sameSubjects(t *testing.T, what string, matches [][]string, script []string) {
	t.Helper()
	var conf []string
	for _, m := range matches {
		conf = append(conf, m[1])
	}
	slices.Sort(conf)
	slices.Sort(script)
	if len(conf) == 0 || !slices.Equal(conf, script) {
		t.Errorf("%s: the script's %q, tenants.conf's %q", what, script, conf)
	}
}

// samePermissions checks that the script's perms of user are tenants.conf's p.
func samePermissions(t *testing.T, user string, p *server.Permissions, perms jwt.Permissions) {
	t.Helper()
	if p == nil {
		p = &server.Permissions{}
	}
	list := func(sp *server.SubjectPermission, deny bool) []string {
		if sp == nil {
			return nil
		}
		if deny {
			return sp.Deny
		}
		return sp.Allow
	}
	for _, c := range []struct {
		what         string
		conf, script []string
	}{
		{"publish allow", list(p.Publish, false), perms.Pub.Allow},
		{"publish deny", list(p.Publish, true), perms.Pub.Deny},
		{"subscribe allow", list(p.Subscribe, false), perms.Sub.Allow},
		{"subscribe deny", list(p.Subscribe, true), perms.Sub.Deny},
	} {
		conf, script := slices.Sorted(slices.Values(c.conf)), slices.Sorted(slices.Values(c.script))
		if !slices.Equal(conf, script) {
			t.Errorf("%s's %s: the script's %q, tenants.conf's %q", user, c.what, script, conf)
		}
	}
	if (p.Response != nil) != (perms.Resp != nil) ||
		(p.Response != nil && (p.Response.MaxMsgs != perms.Resp.MaxMsgs || p.Response.Expires != perms.Resp.Expires)) {
		t.Errorf("%s's responses: the script's %+v, tenants.conf's %+v", user, perms.Resp, p.Response)
	}
}

// jwtImport is an import of a tenant's account: COMPACTOR's subject, the tenant's
// local subject, and the activation token.
type jwtImport struct {
	subject, local, token string
}

// jwtRecipe is the script's operator, accounts and users as keys and claims, and the
// activations COMPACTOR signs.
type jwtRecipe struct {
	operator nkeys.KeyPair
	opClaims *jwt.OperatorClaims
	opJWT    string
	keys     map[string]nkeys.KeyPair // account name: its key
	absent   map[string]bool          // accounts not (or no longer) in the resolver
	full     bool                     // the full NATS resolver instead of the memory one
	exports  jwt.Exports              // COMPACTOR's
	imports  map[string][]jwtImport   // account name: its imports
	users    map[string]nscUser
}

// newJWTRecipe builds the script's operator, SYS, COMPACTOR and its exports, and
// tenants' accounts with their imports and activation tokens.
func newJWTRecipe(t *testing.T, tenants ...string) *jwtRecipe {
	t.Helper()
	r := &jwtRecipe{keys: map[string]nkeys.KeyPair{}, absent: map[string]bool{}, imports: map[string][]jwtImport{}, users: nscUsers(t, tenants...)}
	r.operator = mustKey(t, nkeys.CreateOperator)
	r.opClaims = jwt.NewOperatorClaims(pub(t, r.operator))
	r.opClaims.Name = "compactor"
	for _, a := range append([]string{"SYS", "COMPACTOR"}, tenants...) {
		r.keys[a] = mustKey(t, nkeys.CreateAccount)
	}
	r.opClaims.SystemAccount = pub(t, r.keys["SYS"])
	for _, cmd := range nscCommands(t, "nsc add export") {
		i := slices.Index(cmd, "--subject")
		if i < 0 || !slices.Contains(cmd, "--private") || !slices.Contains(cmd, "--service") {
			t.Fatalf("%s: %q: want a private service export with a --subject", nscScript(), cmd)
		}
		e := &jwt.Export{Subject: jwt.Subject(cmd[i+1]), Type: jwt.Service, TokenReq: true}
		if j := slices.Index(cmd, "--response-threshold"); j >= 0 {
			d, err := time.ParseDuration(cmd[j+1])
			if err != nil {
				t.Fatalf("%s: %q: %v", nscScript(), cmd, err)
			}
			e.ResponseThreshold = d
		}
		r.exports.Add(e)
	}
	for _, tn := range tenants {
		for _, call := range nscCommands(t, "import_activated") {
			subject, local := forTenant(call[4], tn), call[5]
			r.imports[tn] = append(r.imports[tn], jwtImport{subject, local, r.activation(t, tn, subject)})
		}
	}
	return r
}

// importOf is account's import whose local subject is local, for a test to change.
func (r *jwtRecipe) importOf(t *testing.T, account, local string) *jwtImport {
	t.Helper()
	for i := range r.imports[account] {
		if r.imports[account][i].local == local {
			return &r.imports[account][i]
		}
	}
	t.Fatalf("the script imports nothing into %s as %s: change this test", account, local)
	return nil
}

// mustKey is a new key pair of create.
func mustKey(t *testing.T, create func() (nkeys.KeyPair, error)) nkeys.KeyPair {
	t.Helper()
	kp, err := create()
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

// pub is kp's public key.
func pub(t *testing.T, kp nkeys.KeyPair) string {
	t.Helper()
	p, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// activation is the token COMPACTOR signs for account's key to import subject (nsc
// generate activation --account COMPACTOR --target-account <key> --subject subject).
func (r *jwtRecipe) activation(t *testing.T, account, subject string) string {
	t.Helper()
	act := jwt.NewActivationClaims(pub(t, r.keys[account]))
	act.ImportSubject = jwt.Subject(subject)
	act.ImportType = jwt.Service
	token, err := act.Encode(r.keys["COMPACTOR"])
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// accountClaims is the claims of account as the operator signs them.
func (r *jwtRecipe) accountClaims(t *testing.T, name string) *jwt.AccountClaims {
	t.Helper()
	ac := jwt.NewAccountClaims(pub(t, r.keys[name]))
	ac.Name = name
	if name == "COMPACTOR" {
		ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
		ac.Exports = r.exports
	}
	for _, im := range r.imports[name] {
		ac.Imports.Add(&jwt.Import{Account: pub(t, r.keys["COMPACTOR"]), Subject: jwt.Subject(im.subject),
			LocalSubject: jwt.RenamingSubject(im.local), Type: jwt.Service, Token: im.token})
	}
	return ac
}

// writeConfig writes the server's configuration as the script makes it (nsc generate
// config --mem-resolver, included with JetStream; with r.full, the full resolver with
// the accounts preloaded), with the accounts of the recipe
// but those absent, into dir (a new one when ""), listening on a free port of
// 127.0.0.1 and storing in dir, and returns its path. Written again into the same dir,
// nats-server reloads it.
func (r *jwtRecipe) writeConfig(t *testing.T, dir string) string {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	if r.opJWT == "" {
		// Once: the operator of a running server cannot change on a reload.
		var err error
		if r.opJWT, err = r.opClaims.Encode(r.operator); err != nil {
			t.Fatal(err)
		}
	}
	var b strings.Builder
	resolver := "MEMORY"
	if r.full {
		resolver = fmt.Sprintf("{ type: full, dir: %q }", filepath.ToSlash(filepath.Join(dir, "jwt")))
	}
	fmt.Fprintf(&b, "operator: %s\n\nsystem_account: %s\n\nresolver: %s\n\nresolver_preload: {\n", r.opJWT, r.opClaims.SystemAccount, resolver)
	for _, name := range slices.Sorted(maps.Keys(r.keys)) {
		if r.absent[name] {
			continue
		}
		accJWT, err := r.accountClaims(t, name).Encode(r.operator)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "  // Account %q\n  %s: %s\n\n", name, pub(t, r.keys[name]), accJWT)
	}
	b.WriteString("}\n")
	if err := os.WriteFile(filepath.Join(dir, "resolver.conf"), []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "server.conf")
	conf := fmt.Sprintf("listen: 127.0.0.1:-1\n\ninclude ./resolver.conf\n\njetstream {\n  store_dir: %q\n}\n", filepath.ToSlash(filepath.Join(dir, "js")))
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// creds writes the credentials file of the script's user (nsc generate creds).
func (r *jwtRecipe) creds(t *testing.T, user string) string {
	t.Helper()
	u, ok := r.users[user]
	if !ok {
		t.Fatalf("the script has no user %s", user)
	}
	ukp := mustKey(t, nkeys.CreateUser)
	uc := jwt.NewUserClaims(pub(t, ukp))
	uc.Name, uc.Permissions = user, u.perms
	ujwt, err := uc.Encode(r.keys[u.account])
	if err != nil {
		t.Fatal(err)
	}
	seed, err := ukp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	creds, err := jwt.FormatUserConfig(ujwt, seed)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), user+".creds")
	if err := os.WriteFile(path, creds, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// serverLog keeps what a nats-server logs.
type serverLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *serverLog) add(format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, v...))
}

// Noticef logs a notice.
func (l *serverLog) Noticef(format string, v ...any) { l.add(format, v...) }

// Warnf logs a warning.
func (l *serverLog) Warnf(format string, v ...any) { l.add("[WRN] "+format, v...) }

// Fatalf logs a fatal error.
func (l *serverLog) Fatalf(format string, v ...any) { l.add("[FTL] "+format, v...) }

// Errorf logs an error.
func (l *serverLog) Errorf(format string, v ...any) { l.add("[ERR] "+format, v...) }

// Debugf logs a debug line.
func (l *serverLog) Debugf(format string, v ...any) { l.add("[DBG] "+format, v...) }

// Tracef logs a trace line.
func (l *serverLog) Tracef(format string, v ...any) { l.add("[TRC] "+format, v...) }

// has reports whether a line logged so far contains s.
func (l *serverLog) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.ContainsFunc(l.lines, func(line string) bool { return strings.Contains(line, s) })
}

// startJWTServer starts nats-server from the configuration at path (in operator
// mode), logging into the returned log, and shuts it down at cleanup.
func startJWTServer(t *testing.T, path string) (*server.Server, *serverLog) {
	t.Helper()
	o, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("nats-server config %s: %v", path, err)
	}
	o.NoSigs = true
	ns, err := server.NewServer(o)
	if err != nil {
		t.Fatalf("nats-server from %s: %v", path, err)
	}
	log := &serverLog{}
	ns.SetLogger(log, false, false)
	ns.Start()
	t.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	return ns, log
}

// dialJWT connects to ns as the script's user with its credentials file and its own
// inbox prefix, and opts.
func dialJWT(t *testing.T, ns *server.Server, r *jwtRecipe, user string, opts ...nats.Option) (*nats.Conn, error) {
	t.Helper()
	nc, err := nats.Connect(ns.ClientURL(), append(jwtOptions(t, r, user), opts...)...)
	if err == nil {
		t.Cleanup(nc.Close)
	}
	return nc, err
}

// jwtOptions is how the script's user connects: its credentials file, its inbox.
func jwtOptions(t *testing.T, r *jwtRecipe, user string) []nats.Option {
	t.Helper()
	return []nats.Option{nats.Name("compactor-" + user), nats.UserCredentials(r.creds(t, user)),
		nats.CustomInboxPrefix("_INBOX_" + user), nats.MaxReconnects(0),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})}
}

// connectJWT is dialJWT that fails the test on a refusal. The Conn keeps no
// asynchronous errors.
func connectJWT(t *testing.T, ns *server.Server, r *jwtRecipe, user string) *rolestest.Conn {
	t.Helper()
	nc, err := dialJWT(t, ns, r, user)
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	return &rolestest.Conn{User: user, NC: nc}
}

// provisionJWT provisions tenants' layouts as COMPACTOR's admin.
func provisionJWT(t *testing.T, ns *server.Server, r *jwtRecipe, tenants ...string) {
	t.Helper()
	admin := connectJWT(t, ns, r, "admin")
	for _, tn := range tenants {
		cfg, err := jetstream.DefaultConfig().ForTenant(tn)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := jetstream.Provision(ctxFor(t, time.Minute), admin.NC, cfg); err != nil {
			t.Fatalf("provision %s's layout as admin: %v", tn, err)
		}
	}
}

// serveJWT runs compactor serve's api role for the tenants of file as the script's
// api user until the test ends.
func serveJWT(t *testing.T, ns *server.Server, r *jwtRecipe, file string) {
	t.Helper()
	js := jetstream.DefaultConfig()
	env := tenantRoleEnv(t, "api", fakellm.New(t), js, nil)
	cfg, err := env.Config(zerolog.Nop(), telemetry.Telemetry{Metrics: telemetry.NewMetrics("test")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- node.Serve(ctx, node.ServeConfig{
			Node: cfg, NATSURL: ns.ClientURL(), NATSOptions: jwtOptions(t, r, "api"),
			JetStream: js, DrainTimeout: 30 * time.Second,
			Tenants: &node.TenantsSource{Path: file, Every: 100 * time.Millisecond},
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve as api: %v", err)
		}
	})
}

// The script's recipe works as tenants.conf does: acme's producer's JetStream publish
// on chat.c1.msg is stored in CHAT_acme, its PubAck the reply; globex's, with the same
// id, in CHAT_globex; each tenant's service (serve as the api user) answers its
// tenant's compactor.context with its tenant's message only; and a user of globex
// without permissions reaches nothing of acme's.
func TestTenantJWTRecipe(t *testing.T) {
	r := newJWTRecipe(t, "acme", "globex")
	r.users["globex-root"] = nscUser{account: "globex"}
	ns, log := startJWTServer(t, r.writeConfig(t, ""))
	provisionJWT(t, ns, r, "acme", "globex")
	ctx := ctxFor(t, 2*time.Minute)
	for tn, stream := range map[string]string{"acme": "CHAT_acme", "globex": "CHAT_globex"} {
		ack, err := tenantPublish(ctx, connectJWT(t, ns, r, tn+"-producer"), "c1", tn+" secret", "m1")
		if err != nil || ack.Stream != stream {
			t.Fatalf("%s-producer publishes c1: %+v, %v; want the PubAck of %s", tn, ack, err, stream)
		}
	}
	file := filepath.Join(t.TempDir(), "tenants.json")
	writeTenantsFile(t, file, "acme", "globex")
	serveJWT(t, ns, r, file)
	for user, want := range map[string]string{"acme-producer": "acme secret", "acme-reader": "acme secret", "globex-reader": "globex secret"} {
		cl := tenantClient(t, connectJWT(t, ns, r, user))
		eventually(t, time.Minute, user+"'s context through its tenant's service", func() bool {
			cx, err := cl.Context(ctx, "c1")
			return err == nil && len(cx.Messages) > 0
		})
		cx, err := cl.Context(ctx, "c1")
		if err != nil || len(cx.Messages) != 1 || cx.Messages[0].Content.String() != want {
			t.Fatalf("%s's context of c1: %+v, %v; want its one message %q", user, cx, err, want)
		}
	}
	root := connectJWT(t, ns, r, "globex-root")
	for _, s := range globexSubjects {
		boundaryRefused(t, root, strings.ReplaceAll(s, "globex", "acme"), jsNotEnabledForAccount)
	}
	if log.has("validation issues") {
		t.Errorf("nats-server found the recipe's accounts invalid:\n%s", strings.Join(log.lines, "\n"))
	}
}

// An activation is bound to the account it was signed for and to the subjects it
// names: globex's account JWT holding acme's tokens (importing acme's chat and context
// subjects), or acme's importing globex's chat subjects with its own token, fails
// validation; nats-server starts but warns of it, and then refuses every user of that
// account, while the other tenant is served. (nsc refuses the first earlier: "activation
// is not intended for this account".)
func TestTenantJWTActivationOfAnotherRefused(t *testing.T) {
	for _, tc := range []struct {
		what, bad, good, want string
		change                func(t *testing.T, r *jwtRecipe)
	}{
		{"globex holds acme's tokens", "globex", "acme", "activation token doesn't match account it is being included in",
			func(t *testing.T, r *jwtRecipe) {
				for _, local := range []string{"chat.*.msg", "compactor.context"} {
					im := r.importOf(t, "acme", local)
					r.imports["globex"] = append(r.imports["globex"], jwtImport{im.subject, "stolen." + local, im.token})
				}
			}},
		{"acme imports globex's subjects with its own token", "acme", "globex", "activation token import subject",
			func(t *testing.T, r *jwtRecipe) { r.importOf(t, "acme", "chat.*.msg").subject = "chat.globex.*.msg" }},
	} {
		t.Run(tc.what, func(t *testing.T) {
			r := newJWTRecipe(t, "acme", "globex")
			tc.change(t, r)
			vr := jwt.CreateValidationResults()
			r.accountClaims(t, tc.bad).Validate(vr)
			if !strings.Contains(fmt.Sprint(vr.Errors()), tc.want) {
				t.Errorf("%s's claims: validation %v; want %q", tc.bad, vr.Errors(), tc.want)
			}
			ns, log := startJWTServer(t, r.writeConfig(t, ""))
			if !log.has("has validation issues") {
				t.Errorf("nats-server did not warn of %s's account at start:\n%s", tc.bad, strings.Join(log.lines, "\n"))
			}
			provisionJWT(t, ns, r, "acme", "globex")
			ack, err := tenantPublish(ctxFor(t, time.Minute), connectJWT(t, ns, r, tc.good+"-producer"), "c1", "mine", "m1")
			if err != nil || ack.Stream != "CHAT_"+tc.good {
				t.Fatalf("%s-producer publishes: %+v, %v", tc.good, ack, err)
			}
			for _, u := range rolestest.TenantUsers(tc.bad) {
				if _, err := dialJWT(t, ns, r, u); err == nil || !strings.Contains(err.Error(), "Authorization Violation") {
					t.Errorf("%s connects to its account: %v; want an authorization violation", u, err)
				}
			}
		})
	}
}

// What the operator must never sign: an activation whose tenant token is a wildcard.
// COMPACTOR's token for acme naming chat.*.*.msg lets acme's account import
// chat.globex.*.msg, and the server takes it without a word: acme-producer's publish
// is stored in CHAT_globex.
func TestTenantJWTWildcardActivationCrossesTenants(t *testing.T) {
	r := newJWTRecipe(t, "acme", "globex")
	*r.importOf(t, "acme", "chat.*.msg") = jwtImport{"chat.globex.*.msg", "chat.*.msg", r.activation(t, "acme", "chat.*.*.msg")}
	vr := jwt.CreateValidationResults()
	if r.accountClaims(t, "acme").Validate(vr); vr.IsBlocking(true) {
		t.Fatalf("acme's claims with the wildcard token: %v", vr.Errors())
	}
	ns, log := startJWTServer(t, r.writeConfig(t, ""))
	provisionJWT(t, ns, r, "acme", "globex")
	ack, err := tenantPublish(ctxFor(t, time.Minute), connectJWT(t, ns, r, "acme-producer"), "c1", "into globex", "m1")
	if err != nil || ack.Stream != "CHAT_globex" {
		t.Fatalf("acme-producer publishes with a wildcard activation: %+v, %v; want it stored in CHAT_globex (what this test shows)", ack, err)
	}
	if log.has("validation issues") {
		t.Errorf("nats-server warned of the wildcard activation, the recipe can say so:\n%s", strings.Join(log.lines, "\n"))
	}
}

// A tenant added with the memory resolver: its account JWT added to the resolver's
// configuration and one reload, and its producer publishes into its stream through its
// imports, while acme's connection stays. Removed again (its JWT left out, one
// reload): its connection is closed by the server and its users are refused, and
// acme's connection still stays.
func TestTenantJWTAddedAndRemovedByReload(t *testing.T) {
	r := newJWTRecipe(t, "acme", "initech")
	r.absent["initech"] = true
	dir := t.TempDir()
	ns, _ := startJWTServer(t, r.writeConfig(t, dir))
	provisionJWT(t, ns, r, "acme", "initech")
	ctx := ctxFor(t, time.Minute)
	acme := connectJWT(t, ns, r, "acme-producer")
	publishes := func(c *rolestest.Conn, tn, id string) {
		t.Helper()
		if ack, err := tenantPublish(ctx, c, "c1", tn, id); err != nil || ack.Stream != "CHAT_"+tn {
			t.Fatalf("%s publishes: %+v, %v; want the PubAck of CHAT_%s", c.User, ack, err, tn)
		}
	}
	publishes(acme, "acme", "a1")
	refused := func(when string) {
		t.Helper()
		if _, err := dialJWT(t, ns, r, "initech-producer"); err == nil || !strings.Contains(err.Error(), "Authorization Violation") {
			t.Fatalf("initech-producer connects %s: %v; want an authorization violation", when, err)
		}
	}
	refused("before its account is added")

	delete(r.absent, "initech")
	r.writeConfig(t, dir)
	if err := ns.Reload(); err != nil {
		t.Fatalf("reload with initech: %v", err)
	}
	closed := make(chan struct{})
	nc, err := dialJWT(t, ns, r, "initech-producer", nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	if err != nil {
		t.Fatalf("initech-producer connects after the reload: %v", err)
	}
	publishes(&rolestest.Conn{User: "initech-producer", NC: nc}, "initech", "i1")
	publishes(acme, "acme", "a2")

	r.absent["initech"] = true
	r.writeConfig(t, dir)
	if err := ns.Reload(); err != nil {
		t.Fatalf("reload without initech: %v", err)
	}
	select {
	case <-closed:
	case <-ctx.Done():
		t.Fatal("initech-producer's connection stays after its account is removed")
	}
	refused("after its account is removed")
	publishes(acme, "acme", "a3")
	if n := acme.NC.Stats().Reconnects; n != 0 {
		t.Errorf("acme-producer reconnected %d times", n)
	}
}

// COMPACTOR revokes acme's activations (nsc revocations add-activation, COMPACTOR's JWT
// reloaded): acme's account and connection stay, but nothing of Compactor's answers it
// any more, while globex is served on.
func TestTenantJWTActivationRevoked(t *testing.T) {
	r := newJWTRecipe(t, "acme", "globex")
	dir := t.TempDir()
	ns, _ := startJWTServer(t, r.writeConfig(t, dir))
	provisionJWT(t, ns, r, "acme", "globex")
	ctx := ctxFor(t, time.Minute)
	acme, globex := connectJWT(t, ns, r, "acme-producer"), connectJWT(t, ns, r, "globex-producer")
	for i, c := range []*rolestest.Conn{acme, globex} {
		if _, err := tenantPublish(ctx, c, "c1", "before", fmt.Sprint("m", i)); err != nil {
			t.Fatalf("%s publishes: %v", c.User, err)
		}
	}
	for _, e := range r.exports {
		e.RevokeAt(pub(t, r.keys["acme"]), time.Now())
	}
	r.writeConfig(t, dir)
	if err := ns.Reload(); err != nil {
		t.Fatalf("reload with the revocations: %v", err)
	}
	start := time.Now()
	// No responders: nats.go's JetStream publish says "no response from stream".
	if _, err := tenantPublish(ctx, acme, "c1", "after", "a2"); !errors.Is(err, natsjs.ErrNoStreamResponse) {
		t.Errorf("acme-producer publishes after the revocation: %v; want no responders", err)
	}
	checkPrompt(t, start, "acme-producer's publish after the revocation")
	if ack, err := tenantPublish(ctx, globex, "c1", "after", "g2"); err != nil || ack.Stream != "CHAT_globex" {
		t.Errorf("globex-producer publishes after acme's revocation: %+v, %v", ack, err)
	}
	if acme.NC.IsClosed() || acme.NC.Stats().Reconnects != 0 {
		t.Errorf("acme-producer's connection was closed or reconnected: the account stays")
	}
}

// With the full NATS resolver (accounts pushed to the server, nsc push), the server
// refuses a push of globex's account JWT holding acme's activation, and takes one of
// acme's holding a wildcard activation, as the memory resolver does.
func TestTenantJWTFullResolverPushes(t *testing.T) {
	r := newJWTRecipe(t, "acme", "globex")
	r.full = true
	r.users["sys"] = nscUser{account: "SYS"}
	ns, _ := startJWTServer(t, r.writeConfig(t, ""))
	sys := connectJWT(t, ns, r, "sys")
	push := func(account string) string {
		t.Helper()
		accJWT, err := r.accountClaims(t, account).Encode(r.operator)
		if err != nil {
			t.Fatal(err)
		}
		m, err := sys.NC.RequestWithContext(ctxFor(t, refusalDeadline), "$SYS.REQ.CLAIMS.UPDATE", []byte(accJWT))
		if err != nil {
			t.Fatalf("push %s's JWT: %v", account, err)
		}
		return string(m.Data)
	}
	r.imports["globex"] = append(r.imports["globex"], jwtImport{"chat.acme.*.msg", "stolen.*.msg", r.importOf(t, "acme", "chat.*.msg").token})
	if a := push("globex"); !strings.Contains(a, "jwt validation failed") || !strings.Contains(a, "activation token doesn't match account") {
		t.Errorf("push of globex's JWT with acme's token: answered %s; want a validation failure", a)
	}
	*r.importOf(t, "acme", "chat.*.msg") = jwtImport{"chat.globex.*.msg", "chat.*.msg", r.activation(t, "acme", "chat.*.*.msg")}
	if a := push("acme"); !strings.Contains(a, "jwt updated") {
		t.Errorf("push of acme's JWT with a wildcard token: answered %s; want it taken", a)
	}
}

// Why the exports are private: exported publicly (nsc add export without --private),
// any account imports any tenant's subjects without a token, and globex-producer's
// publish is stored in CHAT_acme.
func TestTenantJWTPublicExportCrossesTenants(t *testing.T) {
	r := newJWTRecipe(t, "acme", "globex")
	for _, e := range r.exports {
		e.TokenReq = false
	}
	*r.importOf(t, "globex", "chat.*.msg") = jwtImport{"chat.acme.*.msg", "chat.*.msg", ""}
	ns, _ := startJWTServer(t, r.writeConfig(t, ""))
	provisionJWT(t, ns, r, "acme", "globex")
	ack, err := tenantPublish(ctxFor(t, time.Minute), connectJWT(t, ns, r, "globex-producer"), "c1", "into acme", "m1")
	if err != nil || ack.Stream != "CHAT_acme" {
		t.Fatalf("globex-producer publishes through a public export: %+v, %v; want it stored in CHAT_acme (what this test shows)", ack, err)
	}
}
