package main

import (
	"bytes"
	"crypto/rand"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/internal/fakellm"
	"github.com/compactor/compactor/internal/natsconn"
	"github.com/compactor/compactor/internal/proctest"
	"github.com/compactor/compactor/pipeline"
)

// The deployment files run for real, as far as this machine can: the Dockerfile's build
// command on the Docker build context, and the Compose file's NATS cluster and roles
// with its configuration files and settings.

// TestDockerfileBuildsAStaticBinary runs the Dockerfile's go build, as written, on the
// build context `docker build .` sends (the repository less .dockerignore), and checks
// the binary the final stage gets: static (it has no libc to link), stripped, without
// the builder's paths, and runnable (compactor help, compactor version).
func TestDockerfileBuildsAStaticBinary(t *testing.T) {
	p := problems{}
	d := loadDeployment(repoRoot, nil, &p)
	b, err := dockerGoBuild(d.docker)
	if err != nil {
		t.Fatal(err)
	}
	buildCtx := dockerContext(t, d.ignore)
	out := filepath.Join(t.TempDir(), filepath.Base(b.output))
	// The build argument VERSION, as `docker build --build-arg VERSION=...` passes it.
	const version = "v0.0.0-dockerfile-test"
	argv := append([]string(nil), b.argv...)
	for i := range argv {
		if i > 0 && argv[i-1] == "-o" {
			argv[i] = out
		}
		argv[i] = strings.ReplaceAll(argv[i], "${VERSION}", version)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = buildCtx
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local")
	for k, v := range b.env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	start := time.Now()
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s (the Dockerfile's build, in the build context): %v\n%s", strings.Join(b.argv, " "), err, msg)
	}
	t.Logf("%s: built in %s", strings.Join(b.argv, " "), time.Since(start).Round(time.Second))

	f, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			t.Error("the binary asks for a dynamic loader (PT_INTERP): it is not static")
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("the binary links shared libraries %v (%v): it is not static", libs, err)
	}
	if f.Section(".symtab") != nil {
		t.Error("the binary has a symbol table: -ldflags -s did not apply")
	}
	if f.Section(".debug_info") != nil || f.Section(".zdebug_info") != nil {
		t.Error("the binary has DWARF: -ldflags -w did not apply")
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(data, []byte(buildCtx)) {
		t.Errorf("the binary holds the build directory %s: -trimpath did not apply", buildCtx)
	}
	info, _ := os.Stat(out)
	t.Logf("binary: %.1f MiB", float64(info.Size())/(1<<20))

	for _, args := range [][]string{{"help"}, {"version"}} {
		run := exec.Command(out, args...)
		run.Env = []string{} // as in the image: nothing but what the image sets
		msg, err := run.CombinedOutput()
		if err != nil || len(bytes.TrimSpace(msg)) == 0 || args[0] == "help" && !strings.Contains(string(msg), "Usage:") {
			t.Errorf("%s %s: %v\n%s", out, args[0], err, msg)
		}
		if args[0] == "version" && !strings.Contains(string(msg), version) {
			t.Errorf("compactor version: %s; want the VERSION build argument %s", bytes.TrimSpace(msg), version)
		}
	}
}

// dockerContext copies the repository's files (tracked, or new and not ignored by git)
// less those .dockerignore leaves out into a directory of their own.
func dockerContext(t *testing.T, ignore []string) string {
	t.Helper()
	list, err := exec.Command("git", "-C", repoRoot, "ls-files", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v (the build context is the repository's files)", err)
	}
	dst := t.TempDir()
	n := 0
	for _, rel := range strings.Split(strings.TrimSpace(string(list)), "\n") {
		if dockerIgnored(rel, ignore) {
			continue
		}
		if _, err := os.Stat(filepath.Join(repoRoot, rel)); err != nil {
			continue // deleted in the work tree
		}
		copyFile(t, filepath.Join(repoRoot, rel), filepath.Join(dst, rel))
		n++
	}
	t.Logf("build context: %d files", n)
	return dst
}

// dockerIgnored applies plain-path patterns of .dockerignore (checkDockerfile refuses
// the others): a pattern leaves out the path and everything under it.
func dockerIgnored(rel string, ignore []string) bool {
	for _, p := range ignore {
		p = filepath.ToSlash(filepath.Clean(strings.TrimPrefix(p, "/")))
		if rel == p || strings.HasPrefix(rel, p+"/") {
			return true
		}
	}
	return false
}

// composeRun is a NATS node or a compactor process of the Compose file, run here.
type composeRun struct {
	service string
	proc    *proctest.Proc
	// For a NATS node: its ports here, and its server name.
	client, http, cluster int
	serverName            string
	// For a compactor process: its operators' listener here (and the proxy's address,
	// for the proxy), and its Compose settings.
	ops     string
	proxy   string
	env     Env
	grace   time.Duration
	started time.Time
	ready   time.Duration // from the start to live and ready
}

// TestComposeDeploymentRuns runs deploy/compose.yaml without Docker: its three NATS
// services are nats-server processes of the version go.mod pins, started with the
// service's command, environment and mounted files as they are (copied to where the
// service mounts them, with hosts and ports substituted through the server's flags:
// here they all share one host), and its compactor services are processes of this
// command with the service's command and environment (NATS hosts and the listener's
// port substituted), as many as each service's replicas: first the admin's one-shot
// provision, which must exit 0, then the roles, which the Compose file starts only then
// and which do not need it running. The passwords and the LLM
// settings come from the host's environment, as Compose interpolates them. Then: every
// node is healthy by the Compose health check, every process live and ready by the
// probes of the Kubernetes manifests, a producer's conversation is compacted by the
// trigger and a worker through the fake LLM, a manual compaction is answered by the
// service, an agent's request through the proxy reaches the upstream and its
// conversation is stored, KEDA's query of the Kubernetes ScaledObject finds the workers' consumer on
// its leader, no role met a permissions violation, and every process stops within its
// stop_grace_period.
func TestComposeDeploymentRuns(t *testing.T) {
	natsBin := proctest.NATSServer(t)
	bin := proctest.Compactor(t)
	llm := fakellm.New(t)
	upstream := fakellm.New(t) // the agents' model, behind the proxy

	// The host's environment: passwords of its own, the fake LLM, a small window.
	p := problems{}
	host := map[string]string{
		"COMPACTOR_LLM_BASE_URL":   llm.URL(),
		"COMPACTOR_LLM_API_KEY":    "test-key",
		"COMPACTOR_CONTEXT_WINDOW": "8000",
		"COMPACTOR_PROXY_UPSTREAM": upstream.URL(),
	}
	for _, v := range loadDeployment(repoRoot, nil, &p).passwordVars {
		host[v] = "pw-" + rand.Text()
	}
	d := loadDeployment(repoRoot, host, &p)
	nodes := d.composeNATS(&p)
	if len(p) > 0 {
		t.Fatalf("the deployment files do not load:\n%s", strings.Join(p, "\n"))
	}

	// The NATS services.
	runs := map[string]*composeRun{}
	for _, n := range nodes {
		runs[n.name] = &composeRun{service: n.name, client: proctest.FreePort(t), http: proctest.FreePort(t), cluster: proctest.FreePort(t), serverName: n.opts.ServerName}
	}
	for _, n := range nodes {
		r := runs[n.name]
		root := t.TempDir()
		binds, named := n.mounts()
		for _, b := range binds {
			copyFile(t, filepath.Join(d.root, "deploy", b[0]), filepath.Join(root, b[1]))
		}
		for _, v := range named {
			if err := os.MkdirAll(filepath.Join(root, v[1]), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		// The JetStream store is the volume, where it is mounted here. (nats-server
		// refuses -sd beside a store_dir of its file, so the path is substituted in
		// the copy of the file: the one change besides hosts and ports.)
		relocateStoreDir(t, filepath.Join(root, n.confMount), n.opts.StoreDir, filepath.Join(root, n.opts.StoreDir))
		var args []string
		for _, a := range asList(dig(n.m, "command")) {
			s := str(a)
			for _, b := range binds {
				if s == b[1] {
					s = filepath.Join(root, b[1])
				}
			}
			args = append(args, s)
		}
		var routes []string
		for _, u := range n.opts.Routes {
			to, ok := runs[u.Hostname()]
			if !ok {
				t.Fatalf("%s routes to %s, which is not a NATS service", n.name, u)
			}
			routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", to.cluster))
		}
		args = append(args, "-a", "127.0.0.1", "-p", strconv.Itoa(r.client), "-m", strconv.Itoa(r.http),
			"--cluster", fmt.Sprintf("nats://127.0.0.1:%d", r.cluster), "--routes", strings.Join(routes, ","))
		var env []string
		for k, v := range n.env() {
			env = append(env, k+"="+v)
		}
		r.proc = proctest.Start(t, n.name, natsBin, args, env)
	}
	// Healthy by the Compose health check (its URL, on this node's monitoring port).
	for _, n := range nodes {
		r := runs[n.name]
		u, _ := url.Parse(str(lastOf(asList(dig(n.m, "healthcheck", "test")))))
		u.Host = fmt.Sprintf("127.0.0.1:%d", r.http)
		proctest.WaitFor(t, 60*time.Second, n.name+" healthy ("+u.Path+")", func() error {
			if e := r.proc.UnexpectedExit(); e != "" {
				t.Fatal(e)
			}
			return httpOK(u.String())
		})
		var varz server.Varz
		getJSON(t, fmt.Sprintf("http://127.0.0.1:%d/varz", r.http), &varz)
		var maxStore int64
		if varz.JetStream.Config != nil {
			maxStore = varz.JetStream.Config.MaxStore
		}
		if varz.Name != r.serverName || varz.Cluster.Name != n.opts.Cluster.Name || maxStore != n.opts.JetStreamMaxStore {
			t.Errorf("%s runs as %q in cluster %q (max store %d); its configuration says %q, %q, %d", n.name,
				varz.Name, varz.Cluster.Name, maxStore, r.serverName, n.opts.Cluster.Name, n.opts.JetStreamMaxStore)
		}
	}

	// The compactor services: first the admin's provision, which must exit 0 (the roles
	// depend on service_completed_successfully), then the roles, all at once, with
	// provision no longer running.
	probe := kubeProbePaths(t, d)
	var procs []*composeRun
	var services []composeService
	for _, s := range d.composeServices() {
		if dig(s.m, "build") == nil {
			continue
		}
		if slices.Equal(argsOf(dig(s.m, "command")), provisionArgs) {
			services = append([]composeService{s}, services...)
		} else {
			services = append(services, s)
		}
	}
	for _, s := range services {
		vars := s.env()
		var servers []string
		for _, h := range strings.Split(vars["COMPACTOR_NATS_URL"], ",") {
			u, err := url.Parse(strings.TrimSpace(h))
			if err != nil || runs[u.Hostname()] == nil {
				t.Fatalf("%s: COMPACTOR_NATS_URL server %s is not a NATS service", s.name, h)
			}
			u.Host = fmt.Sprintf("127.0.0.1:%d", runs[u.Hostname()].client)
			servers = append(servers, u.String())
		}
		vars["COMPACTOR_NATS_URL"] = strings.Join(servers, ",")
		e, err := validateProcessEnv(vars)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		var args []string
		for _, a := range asList(dig(s.m, "command")) {
			args = append(args, str(a))
		}
		if slices.Equal(args, provisionArgs) {
			var env []string
			for k, v := range vars {
				env = append(env, k+"="+v)
			}
			start := time.Now()
			pr := proctest.Start(t, s.name, bin, args, env)
			pr.ExpectExit() // it exits on its own
			// Its own --timeout (2m by default) ends it first when it cannot provision.
			if err := pr.Wait(t, 3*time.Minute, "start"); err != nil {
				t.Fatalf("%s (compactor %s as %s) exited with %v; the roles wait for it to exit 0:\n%s",
					s.name, strings.Join(args, " "), e.NATSUser, err, pr.Logs.Tail(16<<10))
			}
			out := pr.Logs.String()
			for _, want := range []string{"provisioned NATS at", "COMPACT_REQUESTS", "KV_compaction", "compactor-workers"} {
				if !strings.Contains(out, want) {
					t.Errorf("%s printed no %q:\n%s", s.name, want, out)
				}
			}
			t.Logf("%s (compactor %s as %s) exited 0 after %s", s.name, strings.Join(args, " "), e.NATSUser, time.Since(start).Round(10*time.Millisecond))
			continue
		}
		if kindOf(args) == proxyProcess {
			e.Roles = "" // compactor proxy runs no other role
		}
		grace, _ := time.ParseDuration(str(dig(s.m, "stop_grace_period")))
		for i := range s.replicas() {
			r := &composeRun{service: fmt.Sprintf("%s-%d", s.name, i+1), env: e, grace: grace}
			r.ops = fmt.Sprintf("127.0.0.1:%d", proctest.FreePort(t))
			vars["COMPACTOR_HTTP_LISTEN"] = r.ops
			if kindOf(args) == proxyProcess {
				r.proxy = fmt.Sprintf("127.0.0.1:%d", proctest.FreePort(t))
				vars[proxyListenVar] = r.proxy
			}
			var env []string
			for k, v := range vars {
				env = append(env, k+"="+v)
			}
			r.started = time.Now()
			r.proc = proctest.Start(t, r.service, bin, args, env)
			procs = append(procs, r)
		}
	}
	// All at once, to see when each became ready.
	deadline := time.Now().Add(90 * time.Second)
	for pending := len(procs); pending > 0; {
		pending = 0
		for _, r := range procs {
			if r.ready != 0 {
				continue
			}
			if e := r.proc.UnexpectedExit(); e != "" {
				t.Fatal(e)
			}
			if httpOK("http://"+r.ops+probe.liveness) == nil && httpOK("http://"+r.ops+probe.readiness) == nil {
				r.ready = time.Since(r.started)
				t.Logf("%s (%q as %s) ready %s after its start", r.service, r.env.Roles, r.env.NATSUser, r.ready.Round(10*time.Millisecond))
				continue
			}
			pending++
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d processes not live and ready (%s, %s) after 90s", pending, probe.liveness, probe.readiness)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Clients connect as the users of accounts.conf, with the host's passwords.
	urls := make([]string, 0, len(nodes))
	for _, n := range nodes {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", runs[n.name].client))
	}
	connect := func(user string) *nats.Conn {
		t.Helper()
		u := d.accounts[user]
		nc, err := nats.Connect(strings.Join(urls, ","), natsconn.Auth{User: user, Password: host[u.passwordVar], InboxPrefix: "_INBOX_" + user}.Option())
		if err != nil {
			t.Fatalf("connect as %s: %v", user, err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	ctx := ctxFor(t, 3*time.Minute)
	producer, err := pipeline.New(ctx, connect("producer"))
	if err != nil {
		t.Fatal(err)
	}
	reader, err := pipeline.New(ctx, connect("reader"))
	if err != nil {
		t.Fatal(err)
	}
	msgs, _ := fakellm.NeedleConversation(20)
	for i, m := range msgs {
		if _, err := producer.Publish(ctx, "compose-budget", m); err != nil {
			t.Fatalf("publish %d as producer: %v", i, err)
		}
	}
	eventually(t, 2*time.Minute, "the trigger and a worker to compact compose-budget", func() bool {
		cx, err := reader.Context(ctx, "compose-budget")
		return err == nil && cx.HasSummary && cx.Generation >= 1
	})
	if llm.Calls() == 0 {
		t.Error("no worker called the LLM of COMPACTOR_LLM_BASE_URL")
	}

	// The service answers (as the admin, who may call it): every process with the api
	// role is an instance, and a manual compaction goes through it to a worker.
	admin := connect(adminUser)
	var instances int
	inbox := nats.NewInbox()
	sub, err := admin.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.PublishRequest("$SRV.PING.compactor", inbox, nil); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := sub.NextMsg(2 * time.Second); err != nil {
			break
		}
		instances++
	}
	wantInstances := 0
	for _, r := range procs {
		if rs, _ := r.env.roles(); rs.API {
			wantInstances++
		}
	}
	if instances != wantInstances {
		t.Errorf("%d instances of the compactor service answered; %d processes run the api role", instances, wantInstances)
	}
	for i, m := range msgs[:33] { // under the budget, with more than the 20 kept messages
		if _, err := producer.Publish(ctx, "compose-manual", m); err != nil {
			t.Fatalf("publish %d as producer: %v", i, err)
		}
	}
	ac, err := pipeline.New(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := ac.Compact(ctx, "compose-manual", pipeline.Wait(time.Minute))
	if err != nil || resp.Status != pipeline.StatusCompleted {
		t.Errorf("manual compaction through the service: %+v, %v", resp, err)
	}

	// An agent's request through each proxy process: answered by the upstream, and the
	// client's message and the reply stored in its conversation.
	var proxies int
	for _, r := range procs {
		if r.proxy == "" {
			continue
		}
		proxies++
		conv := "compose-proxy-" + strconv.Itoa(proxies)
		calls := upstream.Calls()
		status, body := proxyChat(t, r.proxy, conv)
		if status != http.StatusOK || upstream.Calls() != calls+1 {
			t.Errorf("%s: a chat completion through the proxy: %d %s (upstream calls %d, before %d)", r.service, status, body, upstream.Calls(), calls)
			continue
		}
		eventually(t, time.Minute, conv+"'s message and reply stored", func() bool {
			cx, err := reader.Context(ctx, conv)
			return err == nil && len(cx.Messages) == 2 && cx.Messages[1].Role == "assistant"
		})
	}
	if proxies == 0 {
		t.Error("no proxy process ran")
	}

	// KEDA's nats-jetstream scaler: /jsz of the ScaledObject's account, then the node
	// that leads the consumer reports it.
	keda := asMap(dig(asList(dig(d.kubeFind("ScaledObject", "compactor-worker"), "spec", "triggers"))[0], "metadata"))
	var leaders []string
	for _, n := range nodes {
		r := runs[n.name]
		var jsz server.JSInfo
		getJSON(t, fmt.Sprintf("http://127.0.0.1:%d/jsz?%s", r.http, url.Values{
			"acc": {str(keda["account"])}, "consumers": {"true"}, "config": {"true"}}.Encode()), &jsz)
		for _, a := range jsz.AccountDetails {
			if a.Name != str(keda["account"]) {
				continue
			}
			for _, s := range a.Streams {
				for _, c := range s.Consumer {
					if s.Name == str(keda["stream"]) && c.Name == str(keda["consumer"]) && c.Cluster != nil && c.Cluster.Leader == r.serverName {
						leaders = append(leaders, n.name)
						t.Logf("KEDA's query: %s leads %s/%s (pending %d, ack pending %d)", n.name, s.Name, c.Name, c.NumPending, c.NumAckPending)
					}
				}
			}
		}
	}
	if len(leaders) != 1 {
		t.Errorf("the ScaledObject's account %s, stream %s, consumer %s: %d nodes report leading it (%v); KEDA needs one",
			keda["account"], keda["stream"], keda["consumer"], len(leaders), leaders)
	}

	// Metrics, permissions, memory; then each stops within its grace period.
	for _, r := range procs {
		if err := httpOK("http://" + r.ops + "/metrics"); err != nil {
			t.Errorf("%s /metrics: %v", r.service, err)
		}
		// provision had created everything before the roles started: their own
		// provisioning only read it, and nothing was ever refused.
		if l := r.proc.Logs.String(); strings.Contains(l, "Permissions Violation") {
			t.Errorf("%s met a permissions violation:\n%s", r.service, l)
		}
		t.Logf("%s: peak RSS %s", r.service, peakRSS(r.proc.Cmd.Process.Pid))
	}
	for _, r := range procs {
		r.proc.Signal(t, syscall.SIGTERM)
	}
	for _, r := range procs {
		if err := r.proc.Wait(t, r.grace, "SIGTERM (its stop_grace_period)"); err != nil {
			t.Errorf("%s stopped with %v:\n%s", r.service, err, r.proc.Logs.Tail(8<<10))
		}
	}
}

// proxyChat sends one OpenAI chat completion for conversation conv to the proxy at
// addr, as an agent's SDK would, and returns the status and body.
func proxyChat(t *testing.T, addr, conv string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions",
		strings.NewReader(`{"model":"agent-model","messages":[{"role":"user","content":"hello through the proxy"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer agent-key")
	req.Header.Set("X-Compactor-Conversation", conv)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// relocateStoreDir changes the store_dir of the configuration file at conf from dir to
// to; the file must say store_dir dir exactly once.
func relocateStoreDir(t *testing.T, conf, dir, to string) {
	t.Helper()
	data, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^(\s*store_dir\s*[:=]\s*)"?` + regexp.QuoteMeta(dir) + `"?\s*$`)
	if n := len(re.FindAllIndex(data, -1)); n != 1 {
		t.Fatalf("%s: %d lines say store_dir %s; the test relocates one", conf, n, dir)
	}
	data = re.ReplaceAll(data, []byte("${1}"+strconv.Quote(to)))
	if err := os.WriteFile(conf, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// probePaths are the Kubernetes manifests' probe paths.
type probePaths struct{ liveness, readiness string }

func kubeProbePaths(t *testing.T, d *deployment) probePaths {
	t.Helper()
	for _, k := range d.kubeContainers(&problems{}) {
		if k.c["livenessProbe"] == nil {
			continue // the provision Job
		}
		return probePaths{
			liveness:  str(dig(k.c, "livenessProbe", "httpGet", "path")),
			readiness: str(dig(k.c, "readinessProbe", "httpGet", "path")),
		}
	}
	t.Fatal("no container in the Kubernetes manifests")
	return probePaths{}
}

func httpOK(u string) error {
	c := http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get(u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s %s", u, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

func getJSON(t *testing.T, u string, v any) {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("%s: %v", u, err)
	}
}

// peakRSS is a process's peak resident memory (VmHWM), from /proc.
func peakRSS(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	return "unknown"
}
