package systemtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/corpustest"
	"github.com/compactor/compactor/internal/fakellm"
	"github.com/compactor/compactor/internal/natsconn"
	"github.com/compactor/compactor/internal/proctest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/rounds"
	"github.com/compactor/compactor/schemas/tokens"
)

// The soak: three `compactor serve` processes of the real binary and a standalone
// nats-server process, fifty conversations of real transcripts published at once, a
// slow fake LLM, while the test SIGKILLs a random serve process every 10–20 s and starts
// it again, SIGKILLs the nats-server and starts it again on the same port and data,
// SIGTERMs a process whose summaries it holds in flight, and takes the LLM down for
// 12 s (every call answers 500) near the end of publishing. The checker
// (checker_test.go) then finds every message stored once, every revision of every value
// in order, and every conversation inside its bound with its planted facts: the
// fallbacks the outage made were repaired once the LLM answered again.
//
// The default is the short form CI runs (about a minute and a half); COMPACTOR_SOAK=10m
// publishes for ten minutes instead, with the same checks.

// soakForm is how long and how hard the soak runs.
type soakForm struct {
	name       string
	publishFor time.Duration // how long the conversations are published
	convs      int
	minTokens  int // each conversation holds at least this many tokens
	needles    int // facts planted in each conversation
	// serverKillEvery spaces the nats-server kills; 0: one, in the middle.
	serverKillEvery time.Duration
	// termEvery spaces the SIGTERMs; 0: two, at a quarter and three quarters.
	termEvery time.Duration
}

// soakWindow is the agent's context window of the soak: small, so that every
// conversation is compacted several times.
const soakWindow = 4000

// soakFormFor returns the short form, or the long one COMPACTOR_SOAK asks for (a
// duration: how long to publish). It is read before testEnv clears COMPACTOR_ variables.
func soakFormFor(t *testing.T, convs int) soakForm {
	t.Helper()
	short := soakForm{name: "short", publishFor: 45 * time.Second, convs: convs, minTokens: 12000, needles: 8}
	v := os.Getenv("COMPACTOR_SOAK")
	if v == "" {
		return short
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < time.Minute {
		t.Fatalf("COMPACTOR_SOAK=%q: want how long to publish, at least 1m (e.g. 10m)", v)
	}
	long := short
	long.name = "long"
	long.publishFor = d
	// The same pace of tokens per conversation as the short form: more generations.
	long.minTokens = int(float64(short.minTokens) * d.Seconds() / short.publishFor.Seconds())
	long.needles = 12
	long.serverKillEvery = 150 * time.Second
	long.termEvery = 60 * time.Second
	return long
}

// soakConv is one conversation of the soak.
type soakConv struct {
	id, marker string
	msgs       []schemas.Message
	needles    []string
}

// soakConversations builds n conversations of at least minTokens each from the corpus
// (failing in CI when it is absent). Conversation c starts at a transcript of its own
// and goes on through the next ones, unit by unit, until it is long enough (a huge tool
// output, compacted at once, counts for little); tool call ids are made unique per copy
// of a transcript. Each starts with a system prompt of its own, pinned, that names it:
// its marker, which the summarizer sees in every request of it. The corpus's own
// system prompts are left out, and so are units a producer would not publish (tool
// results that answer no call, rounds missing results). needles user messages with a
// planted fact each go between units, spread over the conversation.
func soakConversations(t *testing.T, n, minTokens, needles int) []soakConv {
	t.Helper()
	return soakConversationsOf(t, "", n, minTokens, needles)
}

// soakConversationsOf is soakConversations of a tenant ("": none): the same ids, but
// the tenant's name in each marker ("[acme conversation soak-00]") and in each needle
// (NEEDLE-acmes00k000), so that nothing of one tenant's can pass for another's.
func soakConversationsOf(t *testing.T, tenant string, n, minTokens, needles int) []soakConv {
	t.Helper()
	corpus := corpustest.Load(t)
	var transcripts [][][]schemas.Message // transcript → units → messages
	for _, c := range corpus {
		var units [][]schemas.Message
		for _, u := range rounds.Units(c.Entries) {
			first := c.Entries[u.Start].Message
			switch {
			case u.Kind == rounds.Single && first.Role != schemas.RoleSystem,
				u.Kind == rounds.Round && u.Complete:
				var msgs []schemas.Message
				for _, e := range c.Entries[u.Start:u.End] {
					if e.Message.Role != schemas.RoleSystem {
						msgs = append(msgs, e.Message)
					}
				}
				units = append(units, msgs)
			}
		}
		if len(units) > 0 {
			transcripts = append(transcripts, units)
		}
	}
	if len(transcripts) == 0 {
		t.Fatal("no usable transcript in the corpus")
	}
	out := make([]soakConv, n)
	for c := range out {
		id := fmt.Sprintf("soak-%02d", c)
		cv := soakConv{id: id, marker: "[conversation " + id + "]"}
		if tenant != "" {
			cv.marker = "[" + tenant + " conversation " + id + "]"
		}
		var body [][]schemas.Message
		total := 0
		for k := 0; total < minTokens; k++ {
			for _, u := range transcripts[(c*3+k)%len(transcripts)] {
				if total >= minTokens {
					break
				}
				u = renameCalls(u, fmt.Sprintf("k%d_", k))
				body = append(body, u)
				total += min(tokens.Messages(u), soakWindow/4)
			}
		}
		cv.msgs = []schemas.Message{{Role: schemas.RoleSystem, Content: schemas.Text(
			fmt.Sprintf("You are the coding agent of %s: careful, brief, exact. %s", id, cv.marker))}}
		stride := max(1, len(body)/max(needles, 1))
		for j, u := range body {
			if len(cv.needles) < needles && j%stride == stride/2 {
				needle := fmt.Sprintf("NEEDLE-%ss%02dk%03d", tenant, c, len(cv.needles))
				cv.needles = append(cv.needles, needle)
				cv.msgs = append(cv.msgs, schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(
					fmt.Sprintf("Before you go on, note this for later: the access code of step %d is %s.", len(cv.needles), needle))})
			}
			cv.msgs = append(cv.msgs, u...)
		}
		out[c] = cv
	}
	return out
}

// renameCalls returns msgs with every tool call id prefixed.
func renameCalls(msgs []schemas.Message, prefix string) []schemas.Message {
	out := slices.Clone(msgs)
	for i := range out {
		if len(out[i].ToolCalls) > 0 {
			out[i].ToolCalls = slices.Clone(out[i].ToolCalls)
			for j := range out[i].ToolCalls {
				out[i].ToolCalls[j].ID = prefix + out[i].ToolCalls[j].ID
			}
		}
		if out[i].ToolCallID != "" {
			out[i].ToolCallID = prefix + out[i].ToolCallID
		}
	}
	return out
}

// soak is one run: its processes, its chaos and its figures.
type soak struct {
	t     *testing.T
	form  soakForm
	rng   *rand.Rand
	bin   string
	nodes []*natsNode
	llm   *fakellm.LLM
	env   []string
	slots []*soakSlot
	// chks are the checkers: one of the deployment's conversations, or one per tenant.
	chks []*checker
	// tenants names the tenant of each checker ("" for the deployment's own).
	tenants []string
	// admin is how the test connects to the nodes (the zero Auth: as nobody).
	admin natsconn.Auth
	// afterStop, when set, runs once every serve process exited on SIGTERM, before the
	// checks: what the checkers' reads need running (a tenant's service).
	afterStop func()
	start     time.Time

	llmDownAt time.Time
	// publishedIn and settledIn are when publishing ended and the pipeline settled.
	publishedIn, settledIn time.Duration

	mu      sync.Mutex
	procs   []*proctest.Proc // every process started, to find one that exited on its own
	fig     soakFigures
	planned soakFigures // the server kills and SIGTERMs of the plan
}

// soakSlot is the place of one serve process, started again after each kill.
type soakSlot struct {
	name  string
	route *llmRoute
	env   []string // its own variables, after the soak's
	proc  *serveProc
	runs  int
}

// soakFigures are the faults the soak injected.
type soakFigures struct {
	Kills         int   // serve processes SIGKILLed
	CallsAtKills  int32 // LLM calls in flight at those kills
	Terms         int   // serve processes SIGTERMed with summaries held in flight
	TermsFinished int   // …whose held summaries were let go and finished before the exit
	HeldFinished  int32
	// TermsFinishedHandedBack of those still timed their drain out on another job
	// (stuck on a stream electing its leader) and handed it back.
	TermsFinishedHandedBack int
	TermsHanded             int // …that held on past the drain and handed their requests back
	HeldHanded              int32
	ServerKills             int // nats-server processes SIGKILLed
	ServerDown              time.Duration
	LLMDown                 time.Duration // how long the LLM answered 500 to every call
	Leaders                 []string      // what each server kill took down
}

const (
	// soakAckWait is how long the requests of a SIGKILLed worker wait before another
	// worker gets them (COMPACTOR_WORKER_ACK_WAIT, its minimum).
	soakAckWait = 3 * time.Second
	// soakDrain is COMPACTOR_DRAIN_TIMEOUT: a SIGTERMed process holding summaries hands
	// them back at 9/10 of it, and the rest is what its other roles have to stop in
	// before serve gives up and exits 1.
	soakDrain = 10 * time.Second
)

// TestSoakNothingLost is the soak on one nats-server process, SIGKILLed and started
// again in the middle of the run.
func TestSoakNothingLost(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs nats-server and the binary for a minute or more")
	}
	runSoak(t, soakFormFor(t, 50), 1)
}

// The soak on a three-node cluster of nats-server processes, every stream, bucket and
// consumer at three replicas: the leader of CHAT, then of the results bucket, then of
// the work queue is SIGKILLed mid-run and started again once the others elected a new
// one. Half the conversations of the single-server soak, for the machine runs three
// servers now.
func TestSoakClusterLeaders(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs nats-server and the binary for a minute or more")
	}
	form := soakFormFor(t, 25)
	// Three kills, one per leader, early enough to be back before publishing ends.
	form.serverKillEvery = (form.publishFor - 5*time.Second) / 3
	runSoak(t, form, 3)
}

// soakEnv is the settings the checkers check against: the processes' (s.env).
func soakEnv(t *testing.T, replicas int) stackEnv {
	t.Helper()
	env := testEnv(t, soakWindow)
	env.AckWait = soakAckWait
	env.Replicas = replicas
	return env
}

// newSoak builds the binaries and the conversations, and starts nodes nats-servers
// (a cluster when more than one, everything at that many replicas), the fake LLM and
// three serve processes.
func newSoak(t *testing.T, form soakForm, nodes int) *soak {
	t.Helper()
	convs := soakConversations(t, form.convs, form.minTokens, form.needles)
	env := soakEnv(t, nodes)
	s := startSoak(t, form, nodes, natsconn.Auth{})
	for i := range 3 {
		s.addSlot(fmt.Sprintf("serve-%d", i+1))
	}
	chk := newChecker(t, s.connect("soak-checker", s.admin), env, s.llm, s.slotProcs()...)
	for _, cv := range convs {
		chk.add(t, cv.id, cv.msgs, cv.needles, cv.marker)
	}
	s.chks, s.tenants = []*checker{chk}, []string{""}
	t.Cleanup(func() {
		if t.Failed() {
			s.logsOf(chk.stuck)
		}
	})
	return s
}

// startSoak builds the binaries and starts nodes nats-servers (a cluster when more
// than one, everything at that many replicas; each with natsArgs too), connecting as
// admin, and the fake LLM. The serve processes are the caller's (addSlot).
func startSoak(t *testing.T, form soakForm, nodes int, admin natsconn.Auth, natsArgs ...string) *soak {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	s := &soak{t: t, form: form, rng: rand.New(rand.NewPCG(seed, seed>>1)), admin: admin}
	s.bin = proctest.Compactor(t)
	natsBin := proctest.NATSServer(t)
	t.Logf("soak %s form, seed %d: %d conversations published for %s, %d nats-server node(s)", form.name, seed, form.convs, form.publishFor, nodes)

	if nodes == 1 {
		s.nodes = []*natsNode{newNATSNode(t, natsBin, "soak-nats", natsArgs...)}
	} else {
		clusterPorts := make([]int, nodes)
		for i := range clusterPorts {
			clusterPorts[i] = proctest.FreePort(t)
		}
		for i := range nodes {
			var routes []string
			for j, p := range clusterPorts {
				if j != i {
					routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
				}
			}
			s.nodes = append(s.nodes, newNATSNode(t, natsBin, fmt.Sprintf("soak-nats-%d", i+1), append(slices.Clone(natsArgs),
				"--cluster_name", "soak", "--cluster", fmt.Sprintf("nats://127.0.0.1:%d", clusterPorts[i]),
				"--routes", strings.Join(routes, ","))...))
		}
	}
	for _, n := range s.nodes {
		n.start(t)
		s.track(n.proc)
	}
	jetStreamReady(t, s.urls(), time.Minute, s.admin.Option())

	s.llm = fakellm.New(t)
	s.llm.Set(func(f *fakellm.LLM) { f.Delay, f.Jitter = 300*time.Millisecond, 500*time.Millisecond })
	s.env = []string{
		fmt.Sprintf("COMPACTOR_CONTEXT_WINDOW=%d", soakWindow),
		fmt.Sprintf("COMPACTOR_REPLICAS=%d", nodes),
		"COMPACTOR_LLM_API_KEY=test-key",
		"COMPACTOR_LOG_LEVEL=debug",
		"COMPACTOR_RETRY_DELAY=200ms",
		"COMPACTOR_WORKER_ACK_WAIT=" + soakAckWait.String(),
		"COMPACTOR_DRAIN_TIMEOUT=" + soakDrain.String(),
	}
	return s
}

// addSlot starts a serve process of its own LLM route, with env after the soak's.
func (s *soak) addSlot(name string, env ...string) {
	sl := &soakSlot{name: name, route: newLLMRoute(s.t, s.llm, nil), env: env}
	s.slots = append(s.slots, sl)
	s.run(sl)
}

// slotProcs are the serve processes running now.
func (s *soak) slotProcs() []*proctest.Proc {
	var procs []*proctest.Proc
	for _, sl := range s.slots {
		procs = append(procs, sl.proc.Proc)
	}
	return procs
}

// connect is a connection of the test's to the nodes with a (the zero Auth: as
// nobody), closed at cleanup.
func (s *soak) connect(name string, a natsconn.Auth) *nats.Conn {
	s.t.Helper()
	log := zerolog.New(zerolog.NewTestWriter(s.t)).Level(zerolog.ErrorLevel)
	nc, err := natsconn.Connect(s.urls(), name, log, nats.ReconnectWait(250*time.Millisecond), a.Option())
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(nc.Close)
	return nc
}

// logsOf logs every line of every process's output that names one of the conversations.
func (s *soak) logsOf(ids []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		for _, p := range s.procs {
			var lines []string
			for _, l := range strings.Split(p.Logs.String(), "\n") {
				if strings.Contains(l, `"`+id+`"`) {
					lines = append(lines, l)
				}
			}
			if len(lines) > 0 {
				s.t.Logf("%s in the output of %s:\n%s", id, p.Name, strings.Join(lines, "\n"))
			}
		}
	}
}

// urls is the client URL of every node.
func (s *soak) urls() string {
	var urls []string
	for _, n := range s.nodes {
		urls = append(urls, n.url())
	}
	return strings.Join(urls, ",")
}

func (s *soak) track(p *proctest.Proc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.procs = append(s.procs, p)
}

// run starts the slot's serve process (again).
func (s *soak) run(sl *soakSlot) {
	s.t.Helper()
	sl.runs++
	env := append(slices.Clone(s.env), sl.env...)
	sl.proc = startServeProc(s.t, s.bin, fmt.Sprintf("%s (run %d)", sl.name, sl.runs), s.urls(), sl.route, env)
	s.track(sl.proc.Proc)
}

// unexpectedExits fails the test for every process that exited without being stopped.
func (s *soak) unexpectedExits() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.procs {
		if msg := p.UnexpectedExit(); msg != "" {
			s.t.Fatal(msg)
		}
	}
}

// attemptsFailed is how many publishes and reads of every checker failed so far.
func (s *soak) attemptsFailed() int64 {
	var n int64
	for _, c := range s.chks {
		n += c.attemptsFailed.Load()
	}
	return n
}

// runSoak runs the soak on nodes nats-servers.
func runSoak(t *testing.T, form soakForm, nodes int) {
	s := newSoak(t, form, nodes)
	fig := s.drive()[0]
	s.report(fig, "")
}

// drive runs the soak: it publishes every checker's conversations while the faults
// of the plan happen, waits until everything settled, stops every serve process with
// SIGTERM and checks what each checker published, and that the faults were injected.
// It returns each checker's figures.
func (s *soak) drive() []checkFigures {
	t := s.t
	s.start = time.Now()
	published := s.publishAll()

	// Chaos, on the test's goroutine, each fault at its time (or at once when the one
	// before took longer): all are planned before publishing ends.
	for _, a := range s.plan() {
		time.Sleep(time.Until(s.start.Add(a.at))) // the plan's time, not a wait for a condition
		if t.Failed() {
			break
		}
		s.unexpectedExits()
		a.do()
	}
	<-published
	if t.Failed() {
		t.FailNow()
	}
	s.publishedIn = time.Since(s.start)
	s.unexpectedExits()

	// Nothing pending forever: the trigger read every message, the queue drains, every
	// conversation is under its threshold.
	for _, c := range s.chks {
		c.settled(t, 2*time.Minute)
	}
	s.settledIn = time.Since(s.start)
	s.unexpectedExits()
	// Every serve process drains and exits 0 on SIGTERM.
	for _, sl := range s.slots {
		sl.proc.Signal(t, syscall.SIGTERM)
	}
	for _, sl := range s.slots {
		if err := sl.proc.Wait(t, soakDrain+10*time.Second, "SIGTERM"); err != nil {
			t.Fatalf("%s exited with %v after SIGTERM", sl.proc.Name, err)
		}
	}
	if s.afterStop != nil {
		s.afterStop()
	}
	var figs []checkFigures
	for _, c := range s.chks {
		figs = append(figs, c.verify(t))
	}
	if s.fig.Kills == 0 || s.fig.ServerKills != s.planned.ServerKills || s.fig.Terms != s.planned.Terms {
		t.Fatalf("the soak injected too little: %d process kills, %d of %d server kills, %d of %d SIGTERMs before publishing ended",
			s.fig.Kills, s.fig.ServerKills, s.planned.ServerKills, s.fig.Terms, s.planned.Terms)
	}
	fallbacks := 0
	for i, fig := range figs {
		s.checkOutcomes(fig, s.tenants[i])
		fallbacks += fig.Fallbacks
	}
	if fallbacks == 0 {
		t.Fatalf("the LLM outage of %s made no fallback summary: it tested nothing", s.fig.LLMDown)
	}
	for _, c := range s.chks {
		s.checkRepaired(c)
	}
	return figs
}

// publishAll publishes every checker's conversations at once, each message at its
// time so that every conversation is published over the whole run, and returns a
// channel closed when all are published.
func (s *soak) publishAll() <-chan struct{} {
	var wg sync.WaitGroup
	for _, c := range s.chks {
		for _, cv := range c.convs {
			wg.Go(func() {
				pace := s.form.publishFor / time.Duration(len(cv.msgs))
				for i := range cv.msgs {
					// Pacing: the load is spread over the run, it is no wait for a condition.
					time.Sleep(time.Until(s.start.Add(time.Duration(i) * pace)))
					if _, err := c.publish(cv.id, i, 2*time.Minute); err != nil {
						s.t.Error(err)
						return
					}
				}
			})
		}
	}
	published := make(chan struct{})
	go func() { wg.Wait(); close(published) }()
	return published
}

// checkOutcomes fails the test for a failed event or a dead letter of a checker's
// (of tenant, "" for none) other than the outage's fallbacks, which are on file as
// dead letters.
func (s *soak) checkOutcomes(fig checkFigures, tenant string) {
	var unexpected []string
	for _, c := range fig.DeadCauses {
		if !strings.Contains(c, "(fallback summary written)") {
			unexpected = append(unexpected, c)
		}
	}
	if fig.Failed > 0 || len(unexpected) > 0 {
		s.t.Fatalf("%s%d failed events and %d dead letters besides the outage's fallbacks: %v", tenantLabel(tenant), fig.Failed, len(unexpected), unexpected)
	}
}

// tenantLabel is "<tenant>: ", or "" for none.
func tenantLabel(tenant string) string {
	if tenant == "" {
		return ""
	}
	return tenant + ": "
}

// report logs the faults and what a checker (of tenant, "" for none) checked.
func (s *soak) report(fig checkFigures, tenant string) {
	s.t.Logf("soak %s: %s%d conversations; faults: %d serve processes SIGKILLed (%d LLM calls in flight), "+
		"%d SIGTERMed with summaries in flight (%d let finish: %d calls, %d of them still handing another job back; %d handed back: %d calls), "+
		"%d nats-server SIGKILLs (%s down in all%s), the LLM down for %s; %d messages published, each stored once and checked (%d attempts retried), "+
		"%d contexts read back; %d revisions and %d generations checked (%d–%d per conversation, %d declines, %d fallbacks), "+
		"%d facts kept; %d requests (%d started again), %d failed, %d dead letters; lost: 0; published in %s, settled at %s, %s in all",
		s.form.name, tenantLabel(tenant), fig.Conversations, s.fig.Kills, s.fig.CallsAtKills,
		s.fig.Terms, s.fig.TermsFinished, s.fig.HeldFinished, s.fig.TermsFinishedHandedBack, s.fig.TermsHanded, s.fig.HeldHanded,
		s.fig.ServerKills, s.fig.ServerDown.Round(time.Millisecond), leaders(s.fig.Leaders), s.fig.LLMDown.Round(time.Millisecond), fig.Published, fig.FailedAttempts,
		fig.Reads, fig.Revisions, fig.Generations, fig.MinGeneration, fig.MaxGeneration, fig.Declines, fig.Fallbacks,
		fig.Needles, fig.Requests, fig.StartedAgain, fig.Failed, fig.DeadLetters,
		s.publishedIn.Round(time.Second), s.settledIn.Round(time.Second), time.Since(s.start).Round(time.Second))
	for reason, n := range fig.DeclineReasons {
		s.t.Logf("%sdeclined %d times: %s", tenantLabel(tenant), n, reason)
	}
}

func leaders(l []string) string {
	if len(l) == 0 {
		return ""
	}
	return "; " + strings.Join(l, ", ")
}

// soakAction is one fault, at its time from the start.
type soakAction struct {
	at time.Duration
	do func()
}

// plan is the faults of the run, in time order: a serve process SIGKILLed every
// 10–20 s, nats-server kills and SIGTERMs with summaries in flight, all before the last
// few seconds of publishing.
func (s *soak) plan() []soakAction {
	end := s.form.publishFor - 5*time.Second
	var plan []soakAction
	for at := s.between(10, 20); at < end; at += s.between(10, 20) {
		plan = append(plan, soakAction{at: at, do: s.killProcess})
	}
	if s.form.serverKillEvery == 0 {
		plan = append(plan, soakAction{at: s.form.publishFor / 2, do: s.killServer})
		s.planned.ServerKills++
	} else {
		for at := s.form.serverKillEvery / 2; at < end; at += s.form.serverKillEvery {
			plan = append(plan, soakAction{at: at, do: s.killServer})
			s.planned.ServerKills++
		}
	}
	if s.form.termEvery == 0 {
		plan = append(plan, soakAction{at: s.form.publishFor / 4, do: func() { s.term(true) }},
			soakAction{at: s.form.publishFor * 3 / 4, do: func() { s.term(false) }})
		s.planned.Terms += 2
	} else {
		for i, at := 0, s.form.termEvery/3; at < end; i, at = i+1, at+s.form.termEvery {
			plan = append(plan, soakAction{at: at, do: func() { s.term(i%2 == 0) }})
			s.planned.Terms++
		}
	}
	// The LLM outage: every call fails for 12 s, ending a few seconds before publishing
	// does, so the conversations past their hard limit meanwhile get fallbacks.
	plan = append(plan, soakAction{at: end - soakOutage, do: s.llmDown}, soakAction{at: end, do: s.llmUp})
	slices.SortStableFunc(plan, func(a, b soakAction) int { return int(a.at - b.at) })
	return plan
}

// soakOutage is how long the LLM is down.
const soakOutage = 12 * time.Second

// llmDown makes every LLM call answer 500 until llmUp.
func (s *soak) llmDown() {
	s.llm.Set(func(f *fakellm.LLM) { f.Status = http.StatusInternalServerError })
	s.llmDownAt = time.Now()
	s.t.Logf("%s: the LLM is down (every call answers 500)", s.since())
}

// llmUp ends the outage.
func (s *soak) llmUp() {
	s.llm.Set(func(f *fakellm.LLM) { f.Status = 0 })
	s.fig.LLMDown += time.Since(s.llmDownAt)
	s.t.Logf("%s: the LLM answers again", s.since())
}

// checkRepaired fails the test for a conversation of c's whose last value is still
// built on a fallback: every fallback of the outage was repaired.
func (s *soak) checkRepaired(c *checker) {
	t := s.t
	js := jsFor(t, c.nc)
	for _, cv := range c.convs {
		var v *schemas.Result
		read(t, "the value of "+cv.id, func(ctx context.Context) error {
			kv, err := js.KeyValue(ctx, c.cfg.ResultsBucket)
			if err != nil {
				return err
			}
			e, err := kv.Get(ctx, cv.id)
			if err != nil {
				return err
			}
			v, err = schemas.DecodeResult(e.Value())
			return err
		})
		if v.BuiltOnFallback || v.Fallback {
			t.Fatalf("%s: generation %d is still built on a fallback after the LLM answered again (repair_gap %v)", cv.id, v.Generation, v.RepairGap)
		}
	}
}

// between is a random duration of lo to hi seconds.
func (s *soak) between(lo, hi int) time.Duration {
	return time.Duration(lo)*time.Second + time.Duration(s.rng.Int64N(int64(time.Duration(hi-lo)*time.Second)))
}

// killProcess SIGKILLs a random serve process and starts it again at once.
func (s *soak) killProcess() {
	t := s.t
	sl := s.slots[s.rng.IntN(len(s.slots))]
	inFlight := sl.route.inFlight.Load()
	sl.proc.Kill(t)
	s.fig.Kills++
	s.fig.CallsAtKills += inFlight
	t.Logf("%s: SIGKILLed %s with %d LLM calls in flight", s.since(), sl.proc.Name, inFlight)
	s.run(sl)
}

// killServer SIGKILLs a nats-server (for a cluster, the leader of CHAT, of the
// results bucket or of the work queue, in turn), waits until a publish has failed
// for it, and starts it again on the same port and data.
func (s *soak) killServer() {
	t := s.t
	n, what, asset := s.nodes[0], "", ""
	js := jsFor(t, s.chks[0].nc)
	if len(s.nodes) > 1 {
		cfg := s.chks[0].cfg
		asset = []string{cfg.ChatStream, "KV_" + cfg.ResultsBucket, cfg.RequestsStream}[s.fig.ServerKills%3]
		leader := streamLeader(t, js, asset)
		n = s.node(leader)
		what = fmt.Sprintf("%s (leader of %s)", leader, asset)
		s.fig.Leaders = append(s.fig.Leaders, what)
	}
	failedBefore := s.attemptsFailed()
	down := time.Now()
	n.proc.Kill(t)
	s.fig.ServerKills++
	if asset == "" {
		// Down until a producer has felt it, as a crashed server is until its
		// supervisor starts it again.
		proctest.WaitFor(t, 30*time.Second, "a publish to fail with the server down", func() error {
			if n := s.attemptsFailed(); n == failedBefore {
				return fmt.Errorf("%d failed attempts", n)
			}
			return nil
		})
	} else {
		// Down until the others elected a new leader of what it led.
		proctest.WaitFor(t, 30*time.Second, "a new leader of "+asset, func() error {
			l, err := currentLeader(js, asset, n.name)
			if err == nil && l == n.name {
				return fmt.Errorf("still led by %s", l)
			}
			return err
		})
	}
	n.start(t)
	s.track(n.proc)
	jetStreamReady(t, n.url(), time.Minute, s.admin.Option())
	took := time.Since(down)
	s.fig.ServerDown += took
	if what == "" {
		what = n.name
	}
	t.Logf("%s: SIGKILLed nats-server %s; back after %s", s.since(), what, took.Round(time.Millisecond))
}

func (s *soak) node(name string) *natsNode {
	for _, n := range s.nodes {
		if n.name == name {
			return n
		}
	}
	s.t.Fatalf("no node %s", name)
	return nil
}

// term holds the LLM calls of a random serve process until one is held, then SIGTERMs
// it. With finish, the held calls are let go once it drains, and its jobs finish before
// it exits; without, they are held past its drain timeout, and it hands their requests
// back to the queue. Either way it exits 0, and the checker finds every request it had
// finished or done again by another process.
func (s *soak) term(finish bool) {
	t := s.t
	// Every process's calls are held until one of them has a call in flight: that one
	// is SIGTERMed. (Waiting on one process picked at random failed when the queue's
	// requests went to the others for 30 s: a fault planned, not a fault of the system.)
	type before struct{ held, answered, abandoned int32 }
	was := make([]before, len(s.slots))
	for i, sl := range s.slots {
		was[i] = before{sl.route.held.Load(), sl.route.answered.Load(), sl.route.abandoned.Load()}
		sl.route.holdCalls()
	}
	pick := -1
	proctest.WaitFor(t, 30*time.Second, "an LLM call of a serve process in flight", func() error {
		for _, i := range s.rng.Perm(len(s.slots)) {
			if s.slots[i].route.held.Load() > was[i].held {
				pick = i
				return nil
			}
		}
		return fmt.Errorf("none held")
	})
	for i, sl := range s.slots {
		if i != pick {
			sl.route.release()
		}
	}
	sl := s.slots[pick]
	r, p := sl.route, sl.proc
	heldBefore, answeredBefore, abandonedBefore := was[pick].held, was[pick].answered, was[pick].abandoned
	p.Signal(t, syscall.SIGTERM)
	if finish {
		proctest.WaitFor(t, 10*time.Second, p.Name+" to drain", func() error {
			if !strings.Contains(p.Logs.String(), "shutting down; draining in-flight work") {
				return fmt.Errorf("no drain logged")
			}
			return nil
		})
		r.release()
	}
	if err := p.Wait(t, soakDrain+10*time.Second, "SIGTERM"); err != nil {
		t.Fatalf("%s exited with %v after SIGTERM with summaries in flight; want 0\n%s", p.Name, err, p.Logs.Tail(16<<10))
	}
	held := r.held.Load() - heldBefore
	logs := p.Logs.String()
	if finish {
		answered := r.answered.Load() - answeredBefore
		if answered != held {
			t.Fatalf("%s: %d calls held, %d let finish before the exit; want all\n%s", p.Name, held, answered, p.Logs.Tail(16<<10))
		}
		// The held calls finished; another job of the process may still have timed the
		// drain out, stuck on a stream electing its leader after a node was killed (it
		// was handed back, and the checker finds its request done).
		if strings.Contains(logs, "drain timed out") {
			s.fig.TermsFinishedHandedBack++
		} else if !strings.Contains(logs, "summarizer pool drained") {
			t.Fatalf("%s: neither a drain nor a hand-back logged\n%s", p.Name, p.Logs.Tail(16<<10))
		}
		s.fig.TermsFinished++
		s.fig.HeldFinished += held
	} else {
		// The process aborted the held calls when it handed their requests back.
		proctest.WaitFor(t, 10*time.Second, "the held calls of "+p.Name+" to be given up", func() error {
			if a := r.abandoned.Load() - abandonedBefore; a != held {
				return fmt.Errorf("%d of %d given up", a, held)
			}
			return nil
		})
		if !strings.Contains(logs, "drain timed out; unfinished requests handed back to the queue") {
			t.Fatalf("%s: no hand-back logged with %d calls held past the drain timeout\n%s", p.Name, held, p.Logs.Tail(16<<10))
		}
		r.release()
		s.fig.TermsHanded++
		s.fig.HeldHanded += held
	}
	s.fig.Terms++
	t.Logf("%s: SIGTERMed %s with %d LLM calls held (let finish: %v); exit 0", s.since(), p.Name, held, finish)
	s.run(sl)
}

func (s *soak) since() string { return time.Since(s.start).Round(100 * time.Millisecond).String() }
