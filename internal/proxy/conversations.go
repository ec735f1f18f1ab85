package proxy

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
	"github.com/compactor/compactor/schemas/policy"
)

// The meta keys the proxy writes on every message it stores.
const (
	// MetaPos is the message's position in the client's history, from 1. On a branch's
	// seed (the parent's summary) it is the last position the summary covers.
	MetaPos = "proxy.n"
	// MetaChain is the chain link (Link) through the message: the digest of the client's
	// history up to and including it.
	MetaChain = "proxy.chain"
	// MetaOwner is the digest of the credential the message came with.
	MetaOwner = "proxy.owner"
	// MetaSeed, on a branch's seed messages, names the conversation whose summary they
	// carry.
	MetaSeed = "proxy.seed"
)

// BranchSep separates a conversation's id from the digest that names one of its
// branches: <conversation>--<16 hex digits>. Forgetting the conversation forgets them.
const BranchSep = jetstream.BranchSep

// AnyOwner, as TurnOptions.Owner, binds no conversation to a credential: no owner is
// checked, none written (COMPACTOR_PROXY_BIND_OWNER=false).
const AnyOwner = "*"

// branchDigits is how many hex digits of the client's link name a branch.
const branchDigits = jetstream.BranchDigits

// MaxConversationIDLen is the longest conversation id the proxy takes: a branch's id
// must still be a valid conversation id.
const MaxConversationIDLen = schemas.MaxConversationIDLen - len(BranchSep) - branchDigits

// maxDepth bounds how many branches one request may walk through.
const maxDepth = 8

// maxRemembered bounds the per-process memory of cached prefixes and branch routes.
const maxRemembered = 100_000

// SettingsFunc returns the settings of one conversation (the policy cache's Settings).
type SettingsFunc func(ctx context.Context, conv string) (policy.Settings, error)

// Store is the Conversations the proxy runs on: the client's history is stored once in
// CHAT with a digest chain in each message's meta, and the model is sent the compacted
// context. It is safe for concurrent use.
type Store struct {
	st       *jetstream.Store
	c        *pipeline.Client
	settings SettingsFunc
	log      zerolog.Logger
	now      func() time.Time

	locks  [lockStripes]chan struct{} // one turn's storing at a time per conversation (and stripe) in a process
	mu     sync.Mutex
	sticky map[string]stickyValue // conversation -> the value last sent
	routes map[string]route       // conversation -> the branch last resolved
	warm   *warmCache             // conversation -> its stored context as last read (warm.go)
	chains *chainMemo             // conversation -> the client's last history and its chain (chainmemo.go)

	// beforePublish, when set (tests), is called before each message a turn stores,
	// with its conversation and client position.
	beforePublish func(conv string, pos int)
}

// stickyValue is the compaction a conversation was last sent with, and when: its
// prefix is what the provider has cached.
type stickyValue struct {
	value *schemas.Result
	at    time.Time
}

// route remembers that a client history whose link at pos is link lives on branch.
type route struct {
	pos    int
	link   Digest
	branch string
}

// NewConversations returns the Store of st, on nc. settings gives each conversation's
// policy (its context window bounds what the model is sent).
func NewConversations(nc *nats.Conn, st *jetstream.Store, settings SettingsFunc, log zerolog.Logger) *Store {
	s := &Store{
		st: st, c: pipeline.NewWithStore(nc, st), settings: settings, log: log, now: time.Now,
		sticky: map[string]stickyValue{}, routes: map[string]route{}, warm: newWarmCache(maxWarmBytes),
		chains: newChainMemo(maxChainBytes),
	}
	for i := range s.locks {
		s.locks[i] = make(chan struct{}, 1)
	}
	return s
}

// turnState is what Finish needs of a turn.
type turnState struct {
	root string
	msgs []schemas.Message
	// view is msgs' chain and token estimates, computed once by Prepare: Finish extends
	// it by the reply.
	view  clientView
	owner string
	// gen is the generation of the context sent, and calibrates says the reply lands
	// where that generation is the live one's kind (the conversation the context was
	// read from), so its usage may calibrate the estimate.
	gen        uint64
	calibrates bool
	// compaction: the turn is the agent's compaction request (TurnOptions).
	compaction bool
}

// Prepare implements Conversations. It stores nothing: what the client's history adds
// is stored with the reply, by Finish, once the upstream answered. A request the
// upstream refuses (a bad key, a rate limit) leaves no trace in CHAT.
func (s *Store) Prepare(ctx context.Context, conv string, msgs []schemas.Message, opts TurnOptions) (*Turn, error) {
	if err := checkHistory(conv, msgs); err != nil {
		return nil, err
	}
	view := s.chains.view(conv, msgs)
	chain := view.chain
	pl, err := s.resolveTurn(ctx, conv, msgs, chain, opts.Owner, false, opts.Compaction)
	if err != nil {
		return nil, err
	}
	t := &Turn{Conv: pl.conv, Branch: pl.reason, ClientTokens: view.total()}
	// The client's conversation's settings bound its branches too.
	b, err := s.bounds(ctx, conv, opts.MaxOutput+opts.Reserve)
	if err != nil {
		return nil, err
	}
	switch {
	case pl.upTo > 0:
		err = s.forwardPrefix(ctx, t, pl, msgs, b.limit)
	case pl.fresh:
		err = s.forwardFresh(t, pl, msgs, b.limit)
	default:
		err = s.forward(ctx, t, pl, msgs, b, opts)
	}
	if err != nil {
		return nil, err
	}
	// The usage of a reply calibrates the estimate only for a context as read: not cut,
	// not a prefix of the stored one, not a branch not made yet, not the client's own
	// view of it.
	t.Flattened = pl.flattened
	t.state = &turnState{root: conv, msgs: msgs, view: view, owner: opts.Owner, gen: t.Context.Generation, compaction: opts.Compaction,
		calibrates: pl.upTo == 0 && !pl.fresh && !pl.managed && !t.Cut}
	return t, nil
}

// checkHistory refuses what the proxy cannot store: no messages, an id that is not the
// proxy's to take (too long for its branches, or holding the branches' separator), a
// message that breaks the wire contract.
func checkHistory(conv string, msgs []schemas.Message) error {
	if err := schemas.ValidateConversationID(conv); err != nil {
		return fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	if len(conv) > MaxConversationIDLen {
		return fmt.Errorf("%w: conversation id is %d characters long; the proxy takes at most %d (its branches add %d)",
			ErrBadRequest, len(conv), MaxConversationIDLen, len(BranchSep)+branchDigits)
	}
	if strings.Contains(conv, BranchSep) {
		return fmt.Errorf("%w: conversation id %q holds %q, which the proxy keeps for its branches (<conversation>%s<16 hex digits>)",
			ErrBadRequest, conv, BranchSep, BranchSep)
	}
	if len(msgs) == 0 {
		return fmt.Errorf("%w: the request has no messages", ErrBadRequest)
	}
	for i := range msgs {
		if err := msgs[i].Validate(); err != nil {
			return fmt.Errorf("%w: message %d: %v", ErrBadRequest, i, err)
		}
	}
	return nil
}

// lockStripes is how many locks the conversations share: a fixed number, so that
// memory does not grow with the conversations a process has seen.
const lockStripes = 256

// lock serializes the storing of one conversation's turns in this process (and of the
// others on its stripe). It gives up when ctx ends; the returned func unlocks.
func (s *Store) lock(ctx context.Context, conv string) (func(), error) {
	h := fnv.New32a()
	h.Write([]byte(conv))
	sem := s.locks[h.Sum32()%lockStripes]
	select {
	case sem <- struct{}{}:
		return func() { <-sem }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Finish implements Conversations: it stores what the client's history added and the
// reply after it, where the history now stands (the conversation may have moved since
// Prepare: another turn, another process).
func (s *Store) Finish(ctx context.Context, t *Turn, reply schemas.Message, usage *Usage) error {
	st, ok := t.state.(*turnState)
	if !ok {
		return errors.New("proxy: a turn Prepare did not return")
	}
	reply.Role = schemas.RoleAssistant
	reply.Usage, reply.ContextGeneration = nil, nil
	if usage != nil && usage.Input > 0 {
		reply.Usage = &schemas.Usage{PromptTokens: usage.Input, CompletionTokens: usage.Output,
			TotalTokens: usage.Input + usage.Output, CachedTokens: usage.CacheRead}
		if st.calibrates {
			gen := st.gen
			reply.ContextGeneration = &gen
		}
	}
	unlock, err := s.lock(ctx, st.root)
	if err != nil {
		return err
	}
	defer unlock()
	full := append(append(make([]schemas.Message, 0, len(st.msgs)+1), st.msgs...), reply)
	view := st.view.extend(full)
	pl, err := s.resolveTurn(ctx, st.root, full, view.chain, st.owner, true, st.compaction)
	if err == nil {
		s.chains.remember(st.root, full, view)
	}
	t.Published = max(pl.published-1, 0)
	return err
}

// place is where a client's history stands in the stored conversations.
type place struct {
	// conv is the conversation (or branch) the history extends; reason is "" or why it
	// is a branch.
	conv, reason string
	// at is conv's newest message when read, and from how many of the client's
	// messages conv holds: msgs[from:] are new.
	at   tip
	from int
	// upTo > 0: the client's history is a strict prefix of conv's (it dropped the
	// messages after position upTo).
	upTo int
	// managed: the client's history is its own view of conv (it rewrote or dropped
	// earlier messages, see anchor) that still holds conv's newest message:
	// msgs[from-1] is the client's copy of it. flattened: a compaction request whose
	// messages are not the conversation's (its history flattened into its prompt).
	managed, flattened bool
	// fresh: conv is a branch not made yet; seed is what it starts with (nil: the
	// client's own messages), the parent's messages before its tail.
	fresh bool
	seed  *assemble.Context
	// published is how many messages a storing resolve stored, last the newest's seq.
	published int
	last      uint64
}

// tip is what the newest stored message of a conversation says of the history.
type tip struct {
	seq   uint64
	pos   int
	link  Digest
	owner string
	empty bool
	// msg is the message, without Compactor's metadata: a client history that holds
	// it continues the conversation (see anchor).
	msg schemas.Message
}

// resolve finds the conversation (conv or one of its branches) the client's history
// extends. With store it also stores what the history adds there (making and seeding a
// branch on the way); without, it only reads.
func (s *Store) resolve(ctx context.Context, root string, msgs []schemas.Message, chain []Digest, owner string, store bool) (place, error) {
	return s.resolveTurn(ctx, root, msgs, chain, owner, store, false)
}

// resolveTurn is resolve; with compaction (the request is the agent's request to
// summarize its conversation) a history that holds no copy of the newest message still
// continues the conversation, its last user message (the prompt) and what follows
// being new: some agents send their history flattened into that prompt.
func (s *Store) resolveTurn(ctx context.Context, root string, msgs []schemas.Message, chain []Digest, owner string, store, compaction bool) (place, error) {
	target, reason := root, ""
	rootTip, err := s.tip(ctx, root)
	if err != nil {
		return place{}, err
	}
	if rootTip.empty {
		// New, or forgotten: a branch remembered from before is not its history.
		s.forgetRoute(root)
	} else if r, ok := s.route(root); ok && r.pos <= len(chain) && chain[r.pos-1] == r.link {
		target, reason = r.branch, "edit"
	}
	tp := rootTip
	for depth := 0; depth < maxDepth; depth++ {
		if depth > 0 || target != root {
			if tp, err = s.tip(ctx, target); err != nil {
				return place{}, err
			}
		}
		if depth == 0 && target != root && tp.empty {
			// The branch remembered was never made (its turn got no reply): find the
			// history's place from the conversation itself, which seeds it.
			target, reason, tp = root, "", rootTip
		}
		if err := checkOwner(tp, owner); err != nil {
			return place{}, err
		}
		if tp.empty || tp.pos <= len(chain) && chain[tp.pos-1] == tp.link {
			pl := place{conv: target, reason: reason, at: tp, from: tp.pos, last: tp.seq}
			if !store {
				return pl, nil
			}
			base, err := s.base(ctx, target, tp)
			if err != nil {
				return place{}, err
			}
			n, last, err := s.publish(ctx, target, msgs[tp.pos:], tp.pos, prevLink(chain, tp.pos), writer(owner, tp), base, tp.seq)
			if placeTaken(err) {
				// Another writer stored a message at that place meanwhile (another copy of
				// this turn, the next turn's copy of this reply, another process): read
				// where the conversation stands now and go on from there.
				continue
			}
			pl.published, pl.last = n, max(last, tp.seq)
			return pl, err
		}
		j, err := s.anchorOf(ctx, target, tp, msgs, chain)
		if err != nil {
			return place{}, err
		}
		if j >= 0 {
			// The client rewrote or dropped earlier messages (its own context
			// management) but still holds the newest: the same history, continued.
			pl, again, err := s.continueAfter(ctx, target, reason, tp, msgs, j+1, owner, store)
			if again {
				continue
			}
			return pl, err
		}
		pv, err := s.common(ctx, target, chain)
		if err != nil {
			return place{}, err
		}
		if pv.common == len(chain) {
			return place{conv: target, reason: prefixReason(reason, tp, pv.common), at: tp, upTo: pv.common}, nil
		}
		if u := lastUser(msgs); compaction && pv.common == 0 && u >= 0 {
			// The agent's compaction request with its history flattened into its
			// prompt (OpenCode's): nothing of it is the conversation's history as
			// stored, and the prompt is new. A history that shares a prefix with the
			// stored one but lost its newest message is an edit, compaction or not.
			pl, again, err := s.continueAfter(ctx, target, reason, tp, msgs, u, owner, store)
			if again {
				continue
			}
			pl.flattened = true
			return pl, err
		}
		branch := root + BranchSep + chain[pv.common].String()[:branchDigits]
		s.remember(root, route{pos: pv.common + 1, link: chain[pv.common], branch: branch})
		if reason == "" {
			reason = "edit"
		}
		fresh, err := s.branchTo(ctx, target, branch, pv, chain, writer(owner, tp), store)
		if err != nil {
			return place{}, err
		}
		if fresh != nil {
			return *fresh, nil
		}
		target = branch
	}
	return place{}, fmt.Errorf("%w: the history of %s walks through more than %d branches", ErrBadRequest, root, maxDepth)
}

// continueAfter is the managed place of a client history whose messages from `from` on
// continue target after its newest message tp; storing, it stores them there. again
// says another writer stored a message at that place meanwhile: resolve again.
func (s *Store) continueAfter(ctx context.Context, target, reason string, tp tip, msgs []schemas.Message, from int, owner string, store bool) (pl place, again bool, err error) {
	pl = place{conv: target, reason: reason, at: tp, from: from, last: tp.seq, managed: true}
	if !store {
		return pl, false, nil
	}
	n, last, err := s.publish(ctx, target, msgs[from:], tp.pos, tp.link, writer(owner, tp), tp.seq, tp.seq)
	if placeTaken(err) {
		return place{}, true, nil
	}
	pl.published, pl.last = n, max(last, tp.seq)
	return pl, false, err
}

// placeTaken says a publish found its place taken by another writer: the same message
// id for another message, or another newest message than the one it goes after.
func placeTaken(err error) bool {
	return errors.Is(err, pipeline.ErrDuplicate) || errors.Is(err, jetstream.ErrWrongLastSeq)
}

// prefixReason is why a history that stops short of the stored one is on its own:
// "regenerate" when only the last stored message is gone, else "truncate".
func prefixReason(reason string, tp tip, common int) string {
	switch {
	case reason != "":
		return reason
	case tp.pos == common+1:
		return "regenerate"
	}
	return "truncate"
}

// branchTo goes from parent to its branch: storing, it seeds the branch when it is new;
// reading, it returns the place of a branch not made yet (nil when it exists).
func (s *Store) branchTo(ctx context.Context, parent, branch string, pv parentView, chain []Digest, owner string, store bool) (*place, error) {
	if store {
		return nil, s.seed(ctx, parent, branch, pv, chain, owner)
	}
	tp, err := s.tip(ctx, branch)
	if err != nil || !tp.empty {
		return nil, err
	}
	seed, pos, err := s.seedOf(ctx, parent, pv, chain)
	if err != nil {
		return nil, err
	}
	return &place{conv: branch, reason: "edit", at: tp, from: pos, fresh: true, seed: seed}, nil
}

// prevLink is the link before position pos+1: the chain's at pos, zero at 0.
func prevLink(chain []Digest, pos int) Digest {
	if pos == 0 {
		return Digest{}
	}
	return chain[pos-1]
}

// writer is the owner the messages a request stores after tp are marked with: the
// request's, but for a request that binds no owner (AnyOwner) on a conversation that
// has one, whose owner they carry on. The newest message of a conversation thus always
// names its owner, once it has one, so that checkOwner holds for its whole history.
func writer(owner string, tp tip) string {
	if owner == AnyOwner && tp.owner != "" {
		return tp.owner
	}
	return owner
}

// checkOwner refuses a history that the conversation's newest message says another
// credential wrote (the conversation's owner: see writer).
func checkOwner(tp tip, owner string) error {
	if tp.empty || tp.owner == "" || tp.owner == owner || owner == AnyOwner {
		return nil
	}
	return ErrNotOwner
}

// tip reads a conversation's newest message from the stream leader.
func (s *Store) tip(ctx context.Context, conv string) (tip, error) {
	m, ok, err := s.st.Chat().Last(ctx, conv)
	if err != nil {
		return tip{}, err
	}
	if !ok {
		return tip{empty: true}, nil
	}
	e := m.Entry()
	if e.Err != nil {
		return tip{}, fmt.Errorf("%w: the newest message of %s breaks the wire contract: %v", ErrBadRequest, conv, e.Err)
	}
	pos, link, ok := position(&e.Message)
	if !ok {
		return tip{}, fmt.Errorf("%w: conversation %s was not written through the proxy (its newest message has no %s)", ErrBadRequest, conv, MetaChain)
	}
	return tip{seq: m.Seq, pos: pos, link: link, owner: e.Message.Meta[MetaOwner], msg: e.Message.StripMetadata()}, nil
}

// position reads a stored message's place in the client's history from its meta.
func position(m *schemas.Message) (int, Digest, bool) {
	pos, err := strconv.Atoi(m.Meta[MetaPos])
	if err != nil || pos < 1 {
		return 0, Digest{}, false
	}
	link, ok := parseDigest(m.Meta[MetaChain])
	return pos, link, ok
}

// publish stores msgs as the client's positions from+1 on, after link prev, with ids
// that make the same turn sent again store nothing twice. Each message is stored only
// where the conversation's newest message is the one it goes after (the first after
// sequence after, 0 for an empty conversation: Nats-Expected-Last-Subject-Sequence):
// of two writers that read the same newest message, the second finds its place taken
// (jetstream.ErrWrongLastSeq, checked before the id; pipeline.ErrDuplicate for an id
// another message took) and stores nothing there: its resolve reads where the
// conversation stands now, so a copy of the same turn stores each message once.
//
// base is what the messages are appended after (the sequence of the conversation's
// newest message; for an empty one, what its last forget deleted through): two copies
// of one turn share it, while the same history stored again after a forget does not,
// so the stream's duplicate window never refuses it.
func (s *Store) publish(ctx context.Context, conv string, msgs []schemas.Message, from int, prev Digest, owner string, base, after uint64) (n int, last uint64, err error) {
	if len(msgs) == 0 {
		return 0, 0, nil
	}
	// One at a time: a place another writer filled stops the turn before any later
	// message is stored after that writer's (storing on would mix the two histories).
	for i := range msgs {
		m := msgs[i]
		prev = Link(prev, &m)
		m.Meta = withMeta(m.Meta, from+i+1, prev, owner)
		if s.beforePublish != nil {
			s.beforePublish(conv, from+i+1)
		}
		seq, err := s.c.Publish(ctx, conv, m, pipeline.MsgID(msgID(conv, base, from+i+1)), pipeline.ExpectLastSeq(after))
		if err != nil {
			if errors.Is(err, schemas.ErrInvalid) || errors.Is(err, pipeline.ErrToolResultWithoutCall) || errors.Is(err, pipeline.ErrTooLarge) {
				return 0, 0, fmt.Errorf("%w: %v", ErrBadRequest, err)
			}
			return 0, 0, err
		}
		n, last, after = n+1, seq, seq
	}
	return n, last, nil
}

// msgID is the id of the message at client position pos appended after base. It names
// the place, not the content: two writers filling one place with different messages
// (two replies to the same turn) store the first, and the second learns it
// (pipeline.ErrDuplicate) and goes where its history now belongs.
func msgID(conv string, base uint64, pos int) string {
	return "proxy:" + conv + ":" + strconv.FormatUint(base, 10) + ":" + strconv.Itoa(pos)
}

// base is what a publish to conv appends after (see publish).
func (s *Store) base(ctx context.Context, conv string, tp tip) (uint64, error) {
	if !tp.empty {
		return tp.seq, nil
	}
	_, _, tomb, err := s.st.Results().Live(ctx, conv, true)
	if err != nil || tomb == nil {
		return 0, err
	}
	return tomb.ThroughSeq, nil
}

// withMeta is meta with the proxy's keys set (a copy: the client's map is not changed);
// any other proxy.* key the client sent is dropped.
func withMeta(meta map[string]string, pos int, link Digest, owner string) map[string]string {
	out := make(map[string]string, len(meta)+3)
	for k, v := range meta {
		if !strings.HasPrefix(k, "proxy.") {
			out[k] = v
		}
	}
	out[MetaPos] = strconv.Itoa(pos)
	out[MetaChain] = link.String()
	if owner != "" && owner != AnyOwner {
		out[MetaOwner] = owner
	} else {
		delete(out, MetaOwner)
	}
	return out
}

// remember keeps the branch a client's history was last found on.
func (s *Store) remember(root string, r route) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.routes) >= maxRemembered {
		clear(s.routes)
	}
	s.routes[root] = r
}

// route is the branch remembered for root.
func (s *Store) route(root string) (route, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.routes[root]
	return r, ok
}

// forgetRoute drops what is remembered of conv (its route, its cached prefix and its
// warm context).
func (s *Store) forgetRoute(conv string) {
	s.mu.Lock()
	delete(s.routes, conv)
	delete(s.sticky, conv)
	s.mu.Unlock()
	s.warm.put(conv, nil)
}
