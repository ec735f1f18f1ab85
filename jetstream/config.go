package jetstream

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/compactor/compactor/schemas"
)

// Names are the stream, subject, bucket and consumer names of the wire contract.
// Every name is configurable; the defaults are the contract's.
type Names struct {
	ChatStream      string // CHAT
	ChatPrefix      string // chat: messages on chat.<conv>.msg
	RequestsStream  string // COMPACT_REQUESTS
	RequestPrefix   string // compact.request: requests on compact.request.<conv>
	EventsStream    string // COMPACT_EVENTS
	EventPrefix     string // compact.event: events on compact.event.<conv>
	DeadStream      string // COMPACT_DEAD
	DeadPrefix      string // compact.dead
	ActivityStream  string // ACTIVITY
	ActivityPrefix  string // activity
	ResultsBucket   string // compaction
	PolicyBucket    string // compaction-policy
	ObjectsBucket   string // compaction-objects: object store of message contents over the max payload, named <conv>/<id>
	ForgetBucket    string // compaction-forgotten: short-lived tombstones of forgotten conversations
	TriggerConsumer string // durable consumer of the active trigger on CHAT
	TriggerGroup    string // priority group of the trigger consumer
	WorkerConsumer  string // durable consumer of the summarizer pool on COMPACT_REQUESTS
	IdleConsumer    string // durable consumer of the active trigger on ACTIVITY
	// TriggersBucket is the KV bucket where trigger processes announce themselves when
	// the trigger is partitioned (Config.TriggerPartitions > 1).
	TriggersBucket string // compaction-triggers
	// WindowsBucket is the KV bucket where workers share the context window they
	// learned of each summarizer endpoint and model (see Windows).
	WindowsBucket string // compaction-windows
	// DeploymentBucket is the KV bucket where the processes of a deployment record what
	// they must agree on: the policy defaults of each role (key policy.<role>, see
	// Store.RecordPolicy).
	DeploymentBucket string // compaction-deployment
	// LedgerStream holds the proxy's savings ledger: one entry per phase of each exchange
	// on ledger.<conv> (schemas.LedgerEntry). Optional: "" or a stream this user may not
	// create leaves the ledger off (Store.Ledger().Enabled).
	LedgerStream string // LEDGER
	LedgerPrefix string // ledger
}

// DefaultNames returns the contract's names.
func DefaultNames() Names {
	return Names{
		ChatStream: "CHAT", ChatPrefix: "chat",
		RequestsStream: "COMPACT_REQUESTS", RequestPrefix: "compact.request",
		EventsStream: "COMPACT_EVENTS", EventPrefix: "compact.event",
		DeadStream: "COMPACT_DEAD", DeadPrefix: "compact.dead",
		ActivityStream: "ACTIVITY", ActivityPrefix: "activity",
		ResultsBucket: "compaction", PolicyBucket: "compaction-policy",
		ObjectsBucket: "compaction-objects", ForgetBucket: "compaction-forgotten",
		TriggerConsumer: "compactor-trigger", TriggerGroup: "trigger",
		WorkerConsumer: "compactor-workers", IdleConsumer: "compactor-idle",
		TriggersBucket: "compaction-triggers", WindowsBucket: "compaction-windows",
		DeploymentBucket: "compaction-deployment",
		LedgerStream:     "LEDGER", LedgerPrefix: "ledger",
	}
}

// NamespacedNames returns the contract's names each prefixed with ns (streams with it in
// upper case), so a run that shares a server with a deployment (compactor bench and
// compactor eval against --nats-url) stays apart from the contract's own names, and its
// streams are found by ns to be deleted afterwards. The trigger's priority group is a
// consumer's, not the server's, and keeps its name.
func NamespacedNames(ns string) Names {
	up := strings.ToUpper(ns)
	return Names{
		ChatStream: up + "_CHAT", ChatPrefix: ns + ".chat",
		RequestsStream: up + "_REQUESTS", RequestPrefix: ns + ".request",
		EventsStream: up + "_EVENTS", EventPrefix: ns + ".event",
		DeadStream: up + "_DEAD", DeadPrefix: ns + ".dead",
		ActivityStream: up + "_ACTIVITY", ActivityPrefix: ns + ".activity",
		ResultsBucket: ns + "-compaction", PolicyBucket: ns + "-policy",
		ObjectsBucket: ns + "-objects", ForgetBucket: ns + "-forgotten",
		TriggerConsumer: ns + "-trigger", TriggerGroup: "trigger",
		WorkerConsumer: ns + "-workers", IdleConsumer: ns + "-idle",
		TriggersBucket: ns + "-triggers", WindowsBucket: ns + "-windows",
		DeploymentBucket: ns + "-deployment",
		LedgerStream:     up + "_LEDGER", LedgerPrefix: ns + ".ledger",
	}
}

// Streams lists the streams a layout with these names is made of: the contract's five,
// and the streams under its buckets (KV_<bucket>, OBJ_<bucket>). A run in a namespace of
// its own deletes exactly these, never a stream that merely looks like its own.
func (n Names) Streams() []string {
	out := []string{n.ChatStream, n.RequestsStream, n.EventsStream, n.DeadStream, n.ActivityStream,
		"KV_" + n.ResultsBucket, "KV_" + n.PolicyBucket, "KV_" + n.ForgetBucket, "KV_" + n.TriggersBucket,
		"KV_" + n.WindowsBucket, "KV_" + n.DeploymentBucket, objectsStream(n.ObjectsBucket)}
	if n.LedgerStream != "" {
		out = append(out, n.LedgerStream)
	}
	return out
}

// ObjectsTTL is how long the objects bucket keeps an object: forever when CHAT keeps
// its messages forever, else CHAT's max age plus the duplicate window. A client reuses
// an object only within the duplicate window of storing it (and stores it again later),
// so every object outlives the messages that refer to it.
func (c Config) ObjectsTTL() time.Duration {
	if c.ChatMaxAge <= 0 {
		return 0
	}
	return c.ChatMaxAge + c.DuplicateWindow
}

// Subject builders refuse an id that breaks the conversation id rule
// (schemas.ValidateConversationID): an id such as "*" or "a.b" would otherwise name
// another subject, or every conversation's.

// ChatSubject is the subject a conversation's messages are published on.
func (n Names) ChatSubject(conv string) (string, error) {
	return subject(n.ChatPrefix+".", conv, ".msg")
}

// ChatWildcard matches every conversation's messages as they are published.
func (n Names) ChatWildcard() string { return n.ChatPrefix + ".*.msg" }

// ChatFilter matches every stored message of one conversation, in every layout: on
// chat.<conv>.msg (one partition) and on chat.<conv>.msg.<N>.<p>, where the stream's
// subject transform stores them when the trigger is partitioned (see
// Config.TriggerPartitions). Every reader of a conversation's messages filters with it.
func (n Names) ChatFilter(conv string) (string, error) {
	return subject(n.ChatPrefix+".", conv, ".>")
}

// ConversationOf returns the conversation id of a stored chat subject: chat.<conv>.msg
// or chat.<conv>.msg.<N>.<p> (p < N, both decimal); false for anything else or an id
// that breaks the id rule.
func (n Names) ConversationOf(subject string) (string, bool) {
	rest, ok := strings.CutPrefix(subject, n.ChatPrefix+".")
	if !ok {
		return "", false
	}
	conv, tail, ok := strings.Cut(rest, ".msg")
	if !ok || (tail != "" && !partitionSuffix(tail)) || schemas.ValidateConversationID(conv) != nil {
		return "", false
	}
	return conv, true
}

// partitionSuffix reports whether s is ".<N>.<p>", the tokens a partitioned layout
// appends, with 2 ≤ N ≤ MaxTriggerPartitions and p < N written without leading zeros
// (as the server writes them).
func partitionSuffix(s string) bool {
	rest, ok := strings.CutPrefix(s, ".")
	if !ok {
		return false
	}
	ns, ps, ok := strings.Cut(rest, ".")
	if !ok {
		return false
	}
	n, okN := decimal(ns)
	p, okP := decimal(ps)
	return okN && okP && n >= 2 && n <= MaxTriggerPartitions && p < n
}

// decimal parses a non-negative decimal number without sign or leading zeros.
func decimal(s string) (int, bool) {
	if s == "" || len(s) > 4 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	v := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	return v, true
}

// conversationAfter returns the id that follows prefix + "." in subject (the last
// token of a request, event, dead-letter or activity subject); false when it breaks the
// id rule.
func conversationAfter(prefix, subject string) (string, bool) {
	conv, ok := strings.CutPrefix(subject, prefix+".")
	if !ok || schemas.ValidateConversationID(conv) != nil {
		return "", false
	}
	return conv, true
}

// RequestSubject is where a conversation's compaction request waits.
func (n Names) RequestSubject(conv string) (string, error) {
	return subject(n.RequestPrefix+".", conv, "")
}

// EventSubject is where a conversation's compaction events are published.
func (n Names) EventSubject(conv string) (string, error) {
	return subject(n.EventPrefix+".", conv, "")
}

// LedgerSubject is where a conversation's ledger entries are published.
func (n Names) LedgerSubject(conv string) (string, error) {
	return subject(n.LedgerPrefix+".", conv, "")
}

// DeadSubject is where a conversation's dead letters go.
func (n Names) DeadSubject(conv string) (string, error) {
	return subject(n.DeadPrefix+".", conv, "")
}

// ActivitySubject carries a conversation's idle timer (published; stored on
// activity.<conv>.<N>.<p> when the trigger is partitioned).
func (n Names) ActivitySubject(conv string) (string, error) {
	return subject(n.ActivityPrefix+".", conv, "")
}

// activityFilter matches the idle timers of one conversation in the partitioned
// layouts (activity.<conv>.<N>.<p>); the unpartitioned one is ActivitySubject.
func (n Names) activityFilter(conv string) (string, error) {
	return subject(n.ActivityPrefix+".", conv, ".>")
}

// activityConversationOf returns the conversation id of a stored activity subject:
// activity.<conv> or activity.<conv>.<N>.<p>.
func (n Names) activityConversationOf(subject string) (string, bool) {
	rest, ok := strings.CutPrefix(subject, n.ActivityPrefix+".")
	if !ok {
		return "", false
	}
	conv, tail, _ := strings.Cut(rest, ".")
	if tail != "" && !partitionSuffix("."+tail) {
		return "", false
	}
	if schemas.ValidateConversationID(conv) != nil {
		return "", false
	}
	return conv, true
}

func subject(prefix, conv, suffix string) (string, error) {
	if err := schemas.ValidateConversationID(conv); err != nil {
		return "", err
	}
	return prefix + conv + suffix, nil
}

// Config sets up the streams, buckets and consumers.
type Config struct {
	Names
	// Tenant is the tenant whose names these are ("": the deployment's own, no tenant).
	// Set it with ForTenant, which changes the names with it.
	Tenant string
	// Replicas of every stream and bucket (1 on a single server, 3 in a cluster).
	Replicas int
	// ChatMaxAge, when > 0, bounds how long raw history is kept. 0 keeps it forever.
	ChatMaxAge time.Duration
	// ChatMaxBytes, when > 0, bounds the bytes CHAT holds: a publish that would go over
	// it is refused (the stream discards new messages, never an older one), so the
	// producer knows and nothing stored is lost. A tenant's stored_bytes quota sets it.
	ChatMaxBytes int64
	// ObjectsMaxBytes, when > 0, bounds the bytes the objects bucket holds in the same
	// way: a store over it is refused (the message over the max payload is not
	// published). A tenant's stored_bytes quota sets it.
	ObjectsMaxBytes int64
	// DuplicateWindow is CHAT's window for Nats-Msg-Id de-duplication.
	DuplicateWindow time.Duration
	// EventsMaxAge and DeadMaxAge bound the event and dead-letter streams.
	EventsMaxAge time.Duration
	DeadMaxAge   time.Duration
	// LedgerMaxAge and LedgerMaxBytes bound the savings ledger (LedgerStream): its
	// oldest entries go first.
	LedgerMaxAge   time.Duration
	LedgerMaxBytes int64
	// ResultHistory is how many revisions of each KV value are kept.
	ResultHistory uint8
	// WorkerAckWait is how long a worker may hold a request without InProgress: what a
	// worker that dies or freezes holding one costs before another gets it. Working
	// jobs send InProgress every 2 s at most (see summarizer.Config.InProgressEvery), so
	// it can be short.
	WorkerAckWait time.Duration
	// TriggerAckWait is how long the trigger may hold a chat message before redelivery.
	TriggerAckWait time.Duration
	// TriggerPinnedTTL is how long the pinned trigger may stay silent before a standby
	// takes over.
	TriggerPinnedTTL time.Duration
	// ActivityMarkerTTL is how long the idle markers of ACTIVITY outlive their messages.
	ActivityMarkerTTL time.Duration
	// MaxObjectSize bounds the object of one message over the max payload (its content,
	// reasoning, extra and unknown fields as JSON): a client refuses to store a larger
	// one, and a reader refuses to fetch one, before reading a byte of it.
	MaxObjectSize int64
	// ForgetTTL is how long the tombstone of a forgotten conversation stays in the forget
	// bucket: longer than any job or trigger request can be in flight (a summarizer call,
	// its retries and backoffs), so a late write of the forgotten conversation is still
	// recognised and taken back.
	ForgetTTL time.Duration
	// TriggerPartitions is how many partitions the trigger's work is split into. 1 (the
	// default) is the wire contract's single pinned trigger consumer. N > 1 adds a
	// subject transform to CHAT and ACTIVITY that stores each conversation's messages
	// under the partition the hash of its id falls in, one pinned consumer pair per
	// partition, and the TriggersBucket where trigger processes share the partitions
	// out. Every process must use the same N (Provision refuses another).
	TriggerPartitions int
	// TriggerHeartbeat is how often a trigger process of a partitioned trigger announces
	// itself in the TriggersBucket; it stays a member for 3 heartbeats after its last.
	TriggerHeartbeat time.Duration
	// UpdateExisting lets Provision change existing streams, buckets and consumers whose
	// settings differ from this config (say, CHAT's max age, which deletes raw history
	// older than it for every process). Off, Provision changes nothing that exists and
	// reports every difference as an ErrConflict. Set it only on purpose, in one process.
	UpdateExisting bool
}

// DefaultConfig returns the contract's defaults for a single server.
func DefaultConfig() Config {
	return Config{
		Names:             DefaultNames(),
		Replicas:          1,
		DuplicateWindow:   2 * time.Minute,
		EventsMaxAge:      7 * 24 * time.Hour,
		DeadMaxAge:        30 * 24 * time.Hour,
		LedgerMaxAge:      DefaultLedgerMaxAge,
		LedgerMaxBytes:    DefaultLedgerMaxBytes,
		ResultHistory:     5,
		WorkerAckWait:     DefaultWorkerAckWait,
		TriggerAckWait:    30 * time.Second,
		TriggerPinnedTTL:  10 * time.Second,
		ActivityMarkerTTL: 24 * time.Hour,
		MaxObjectSize:     DefaultMaxObjectSize,
		ForgetTTL:         24 * time.Hour,
		TriggerPartitions: 1,
		TriggerHeartbeat:  2 * time.Second,
	}
}

// DefaultLedgerMaxAge and DefaultLedgerMaxBytes bound the savings ledger: about 400
// bytes an entry, two entries an exchange, so a GiB is over a million exchanges.
const (
	DefaultLedgerMaxAge   = 400 * 24 * time.Hour
	DefaultLedgerMaxBytes = 1 << 30
)

// DefaultWorkerAckWait is Config.WorkerAckWait's default: three of the workers' 2 s
// heartbeats, so a dead worker's request is another's within seconds while one or two
// lost heartbeats (a busy machine, a stream electing its leader) cost nothing.
const DefaultWorkerAckWait = 6 * time.Second

// DefaultMaxObjectSize is 16 MiB, about 4 million tokens: more than any model's window.
const DefaultMaxObjectSize = 16 << 20

// ErrConfig is matched by every configuration error.
var ErrConfig = errors.New("invalid jetstream config")

// Validate checks the config.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, args...))
	}
	for name, v := range map[string]string{
		"chat stream": c.ChatStream, "chat prefix": c.ChatPrefix, "requests stream": c.RequestsStream,
		"request prefix": c.RequestPrefix, "events stream": c.EventsStream, "event prefix": c.EventPrefix,
		"dead stream": c.DeadStream, "dead prefix": c.DeadPrefix, "activity stream": c.ActivityStream,
		"activity prefix": c.ActivityPrefix, "results bucket": c.ResultsBucket, "policy bucket": c.PolicyBucket,
		"objects bucket": c.ObjectsBucket, "forget bucket": c.ForgetBucket, "triggers bucket": c.TriggersBucket, "windows bucket": c.WindowsBucket,
		"deployment bucket": c.DeploymentBucket, "trigger consumer": c.TriggerConsumer, "trigger group": c.TriggerGroup, "worker consumer": c.WorkerConsumer, "idle consumer": c.IdleConsumer,
	} {
		if v == "" {
			return bad("%s name is empty", name)
		}
		if strings.ContainsAny(v, " *>\t") {
			return bad("%s name %q contains a space or wildcard", name, v)
		}
	}
	if c.LedgerStream != "" {
		for name, v := range map[string]string{"ledger stream": c.LedgerStream, "ledger prefix": c.LedgerPrefix} {
			if v == "" || strings.ContainsAny(v, " *>\t") {
				return bad("%s name %q is empty or contains a space or wildcard", name, v)
			}
		}
	}
	switch {
	case c.LedgerMaxAge < 0 || c.LedgerMaxBytes < 0:
		return bad("ledger max age and max bytes must not be negative")
	case c.Replicas < 1 || c.Replicas > 5:
		return bad("replicas must be 1 to 5, got %d", c.Replicas)
	case c.ChatMaxAge < 0:
		return bad("chat max age must not be negative")
	case c.ChatMaxBytes < 0 || c.ObjectsMaxBytes < 0:
		return bad("chat and objects max bytes must not be negative")
	case c.DuplicateWindow <= 0:
		return bad("duplicate window must be positive")
	case c.ChatMaxAge > 0 && c.ChatMaxAge < c.DuplicateWindow:
		return bad("chat max age %s must not be shorter than the duplicate window %s", c.ChatMaxAge, c.DuplicateWindow)
	case c.ResultHistory < 1 || c.ResultHistory > 64:
		return bad("result history must be 1 to 64, got %d", c.ResultHistory)
	case c.WorkerAckWait < time.Second:
		return bad("worker ack wait must be at least 1s")
	case c.TriggerAckWait < time.Second:
		return bad("trigger ack wait must be at least 1s")
	case c.TriggerPinnedTTL < time.Second:
		return bad("trigger pinned TTL must be at least 1s")
	case c.ActivityMarkerTTL < time.Second:
		return bad("activity marker TTL must be at least 1s")
	case c.MaxObjectSize < 1<<10 || c.MaxObjectSize > 1<<30:
		return bad("max object size must be 1 KiB to 1 GiB, got %d bytes", c.MaxObjectSize)
	case c.TriggerPartitions < 1 || c.TriggerPartitions > MaxTriggerPartitions:
		return bad("trigger partitions must be 1 to %d, got %d", MaxTriggerPartitions, c.TriggerPartitions)
	case c.TriggerHeartbeat < 100*time.Millisecond:
		return bad("trigger heartbeat must be at least 100ms, got %s", c.TriggerHeartbeat)
	case c.ForgetTTL < time.Minute:
		return bad("forget TTL must be at least 1m, got %s: tombstones must outlive the jobs in flight", c.ForgetTTL)
	}
	return nil
}
