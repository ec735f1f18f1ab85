package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
)

// MaxTriggerPartitions bounds Config.TriggerPartitions: every partition is a pair of
// durable consumers every trigger process may bind.
const MaxTriggerPartitions = 256

// Partition names one partition of the trigger's work: P of N. The zero value and
// {N: 1} are the unpartitioned layout of the wire contract (one consumer pair).
type Partition struct{ N, P int }

// Partitioned reports whether p is one of several partitions.
func (p Partition) Partitioned() bool { return p.N > 1 }

func (p Partition) String() string {
	if !p.Partitioned() {
		return "all"
	}
	return fmt.Sprintf("%d/%d", p.P, p.N)
}

// Partitions returns the partitions of cfg's layout: one per TriggerPartitions.
func (c Config) Partitions() []Partition {
	n := max(c.TriggerPartitions, 1)
	if n == 1 {
		return []Partition{{N: 1}}
	}
	out := make([]Partition, n)
	for i := range out {
		out[i] = Partition{N: n, P: i}
	}
	return out
}

// PartitionOf returns the partition of conversation conv among n: the server's
// partition(n, 1) of the stream subject transform, an FNV-1a 32-bit hash of the id
// modulo n (nats-server subject_transform.go, getHashPartition), so it is the same for
// CHAT and ACTIVITY.
func PartitionOf(conv string, n int) int {
	if n <= 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(conv))
	return int(h.Sum32() % uint32(n))
}

// suffix is what the partitioned layout appends to a subject: ".<N>.<p>".
func (p Partition) suffix() string {
	if !p.Partitioned() {
		return ""
	}
	return "." + strconv.Itoa(p.N) + "." + strconv.Itoa(p.P)
}

// TriggerConsumerOf is the durable trigger consumer on CHAT of partition p:
// TriggerConsumer itself unpartitioned, else TriggerConsumer-N-p.
func (n Names) TriggerConsumerOf(p Partition) string {
	if !p.Partitioned() {
		return n.TriggerConsumer
	}
	return fmt.Sprintf("%s-%d-%d", n.TriggerConsumer, p.N, p.P)
}

// IdleConsumerOf is the durable idle consumer on ACTIVITY of partition p.
func (n Names) IdleConsumerOf(p Partition) string {
	if !p.Partitioned() {
		return n.IdleConsumer
	}
	return fmt.Sprintf("%s-%d-%d", n.IdleConsumer, p.N, p.P)
}

// chatFilterOf is the filter of partition p's trigger consumer.
func (n Names) chatFilterOf(p Partition) string { return n.ChatWildcard() + p.suffix() }

// activityFilterOf is the filter of partition p's idle consumer.
func (n Names) activityFilterOf(p Partition) string { return n.ActivityPrefix + ".*" + p.suffix() }

// chatTransform is CHAT's subject transform for the layout of n partitions; nil for one.
func (n Names) chatTransform(parts int) *natsjs.SubjectTransformConfig {
	if parts <= 1 {
		return nil
	}
	return &natsjs.SubjectTransformConfig{
		Source:      n.ChatWildcard(),
		Destination: fmt.Sprintf("%s.{{wildcard(1)}}.msg.%d.{{partition(%d,1)}}", n.ChatPrefix, parts, parts),
	}
}

// activityTransform is ACTIVITY's subject transform for the layout of n partitions.
func (n Names) activityTransform(parts int) *natsjs.SubjectTransformConfig {
	if parts <= 1 {
		return nil
	}
	return &natsjs.SubjectTransformConfig{
		Source:      n.ActivityPrefix + ".*",
		Destination: fmt.Sprintf("%s.{{wildcard(1)}}.%d.{{partition(%d,1)}}", n.ActivityPrefix, parts, parts),
	}
}

// triggerPullExpiry is how long a pull of a trigger consumer waits for messages: half
// the pinned TTL (at least 1 s, the client's least). The server renews a pin when its
// client pulls again, and the client pulls again when a pull expires or half its batch
// is used: with the client's default expiry (30 s), a trigger that got fewer than half
// a batch in a pinned TTL sent no pull in it and lost its pin to a standby, which then
// counted every conversation again. A pinned TTL under 2 s cannot be kept that way.
func (c Config) triggerPullExpiry() time.Duration {
	return max(c.TriggerPinnedTTL/2, time.Second)
}

// ConsumePartition is Consume for partition p's trigger consumer.
func (ch *Chat) ConsumePartition(ctx context.Context, p Partition, handle func(*Delivery), onErr func(error)) (*Consumption, error) {
	return ch.consume(ctx, ch.cfg.ChatStream, ch.cfg.TriggerConsumerOf(p), ch.cfg.ConversationOf, handle, onErr)
}

// ConsumePartition is Consume for partition p's idle consumer.
func (ac *Activity) ConsumePartition(ctx context.Context, p Partition, handle func(*Delivery), onErr func(error)) (*Consumption, error) {
	return ac.consume(ctx, ac.cfg.ActivityStream, ac.cfg.IdleConsumerOf(p), ac.cfg.activityConversationOf, handle, onErr)
}

// AckState is, as the leader of partition p's trigger consumer on CHAT has it, the
// stream sequence through which every message is acknowledged (floor) and the highest
// stream sequence it delivered (delivered), from one consumer info.
func (ch *Chat) AckState(ctx context.Context, p Partition) (floor, delivered uint64, err error) {
	durable := ch.cfg.TriggerConsumerOf(p)
	c, err := ch.js.Consumer(ctx, ch.cfg.ChatStream, durable)
	if err != nil {
		return 0, 0, fmt.Errorf("consumer %s on %s: %w", durable, ch.cfg.ChatStream, err)
	}
	info := c.CachedInfo()
	return info.AckFloor.Stream, info.Delivered.Stream, nil
}

// maxBetweenBytes bounds one page of ConversationsBetween's reads.
const maxBetweenBytes = 1 << 20

// ConversationsBetween returns the conversations of partition p that have messages with
// stream sequences from through through, each once, in the order of their first
// message there. It reads the messages with batched direct gets of the partition's
// subjects, a page of at most 1 MiB at a time, keeping only the subjects. A replica
// holds the stream up to the last message it returns (it applies the stream in order);
// when one returns nothing, the stream leader is asked for the next message, so a
// replica behind the others holds nothing back.
func (ch *Chat) ConversationsBetween(ctx context.Context, p Partition, from, through uint64) ([]string, error) {
	filter := ch.cfg.chatFilterOf(p)
	var convs []string
	seen := map[string]bool{}
	for from <= through {
		page, _, err := ch.directRequest(ctx, ch.cfg.ChatStream,
			map[string]any{"seq": from, "next_by_subj": filter, "batch": DirectBatchSize, "max_bytes": maxBetweenBytes}, filter)
		if err != nil {
			return nil, err
		}
		if len(page) == 0 {
			m, err := ch.leaderGet(ctx, ch.cfg.ChatStream, map[string]any{"seq": from, "next_by_subj": filter})
			if errors.Is(err, errNoMessage) {
				return convs, nil
			}
			if err != nil {
				return nil, err
			}
			page = []StoredMsg{m}
		}
		for _, m := range page {
			if m.Seq > through {
				return convs, nil
			}
			if conv, ok := ch.cfg.ConversationOf(m.Subject); ok && !seen[conv] {
				seen[conv] = true
				convs = append(convs, conv)
			}
		}
		from = page[len(page)-1].Seq + 1
	}
	return convs, nil
}

// UnpinPartition unpins whichever client holds partition p's trigger and idle
// consumers, so the next client that pulls is pinned at once instead of after the
// pinned TTL. A process calls it after it stopped consuming a partition it no longer
// owns; it must not be called while it still pulls on them.
func (ch *Chat) UnpinPartition(ctx context.Context, p Partition) error {
	var errs []error
	for _, c := range []struct{ stream, consumer string }{
		{ch.cfg.ChatStream, ch.cfg.TriggerConsumerOf(p)},
		{ch.cfg.ActivityStream, ch.cfg.IdleConsumerOf(p)},
	} {
		st, err := ch.js.Stream(ctx, c.stream)
		if err == nil {
			err = st.UnpinConsumer(ctx, c.consumer, ch.cfg.TriggerGroup)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("unpin %s on %s: %w", c.consumer, c.stream, err))
		}
	}
	return errors.Join(errs...)
}

// ErrMember is the error of a trigger member id that cannot be a key of the triggers
// bucket.
var ErrMember = errors.New("invalid trigger member id")

// ValidateMember checks that id can name a trigger process: 1 to 64 characters of
// [A-Za-z0-9_-].
func ValidateMember(id string) error {
	if id == "" || len(id) > 64 {
		return fmt.Errorf("%w: %q must be 1 to 64 characters", ErrMember, id)
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("%w: %q may hold only A-Z, a-z, 0-9, _ and -", ErrMember, id)
		}
	}
	return nil
}

// TriggersTTL is how long a trigger process stays a member of the triggers bucket
// after its last heartbeat.
func (c Config) TriggersTTL() time.Duration { return 3 * c.TriggerHeartbeat }

// Membership is a trigger process's handle on the triggers bucket.
type Membership struct {
	s  *Store
	kv natsjs.KeyValue
}

// Membership binds the triggers bucket (Provision creates it when the trigger is
// partitioned).
func (s *Store) Membership(ctx context.Context) (*Membership, error) {
	kv, err := s.js.KeyValue(ctx, s.cfg.TriggersBucket)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", s.cfg.TriggersBucket, err)
	}
	return &Membership{s: s, kv: kv}, nil
}

// key is id's key in the triggers bucket: under the partition count, so processes
// with another count (while an operator changes it, see docs/operations.md, "Scaling the trigger")
// are not counted among the members of this layout: they would be given partitions
// they do not consume.
func (m *Membership) key(id string) (string, error) {
	if err := ValidateMember(id); err != nil {
		return "", err
	}
	return strconv.Itoa(m.s.cfg.TriggerPartitions) + "." + id, nil
}

// Announce writes id's heartbeat: it stays a member for TriggersTTL.
func (m *Membership) Announce(ctx context.Context, id string) error {
	key, err := m.key(id)
	if err != nil {
		return err
	}
	body, _ := json.Marshal(map[string]any{"at": time.Now().UTC()})
	if _, err := m.kv.Put(ctx, key, body); err != nil {
		return fmt.Errorf("announce trigger %s: %w", id, err)
	}
	return nil
}

// Leave removes id at once, so its partitions move without waiting for its heartbeat
// to expire.
func (m *Membership) Leave(ctx context.Context, id string) error {
	key, err := m.key(id)
	if err != nil {
		return err
	}
	if err := m.kv.Delete(ctx, key); err != nil {
		return fmt.Errorf("trigger %s leaves: %w", id, err)
	}
	return nil
}

// Members returns the ids of the live trigger processes of this partition count,
// sorted: the keys of the triggers bucket whose heartbeat has not expired, read with
// one batched direct get of the last message of every key. Deleted keys and keys that
// break the member rule (a hostile writer) are left out.
func (m *Membership) Members(ctx context.Context) ([]string, error) {
	prefix := "$KV." + m.s.cfg.TriggersBucket + "." + strconv.Itoa(m.s.cfg.TriggerPartitions) + "."
	stream := "KV_" + m.s.cfg.TriggersBucket
	// One batch: a member is one trigger process, far fewer than a batch holds.
	page, _, err := m.s.directRequest(ctx, stream, map[string]any{"multi_last": []string{prefix + "*"}, "batch": DirectBatchSize}, prefix+"*")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, sm := range page {
		if sm.Header.Get("KV-Operation") != "" {
			continue // a deleted or purged key
		}
		id, ok := strings.CutPrefix(sm.Subject, prefix)
		if ok && ValidateMember(id) == nil {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// AssignPartitions shares n partitions out among members: the owner of each partition, by
// partition number ("" when there are no members). Every process computes the same
// answer from the same member set. It is rendezvous hashing with bounded loads: the
// (member, partition) pairs are taken in the order of their hash, highest first, and a
// pair is kept while its partition is free and its member holds fewer than its share,
// so every member owns ⌊n/m⌋ or ⌈n/m⌉ partitions, and a member that joins or leaves
// moves few partitions other than its own (plain rendezvous hashing, the highest hash
// only, leaves members without any partition far too often with few partitions).
func AssignPartitions(members []string, n int) []string {
	owners := make([]string, n)
	ms := slices.Clone(members)
	slices.Sort(ms)
	ms = slices.Compact(ms)
	if len(ms) == 0 || n <= 0 {
		return owners
	}
	type pair struct {
		score uint64
		m     int
		p     int
	}
	pairs := make([]pair, 0, len(ms)*n)
	for mi, m := range ms {
		for p := range n {
			pairs = append(pairs, pair{score: score(m, p), m: mi, p: p})
		}
	}
	slices.SortFunc(pairs, func(a, b pair) int {
		switch {
		case a.score != b.score:
			if a.score > b.score {
				return -1
			}
			return 1
		case a.m != b.m:
			return a.m - b.m
		}
		return a.p - b.p
	})
	floor, extra := n/len(ms), n%len(ms)
	count := make([]int, len(ms))
	left := n
	for _, pr := range pairs {
		if owners[pr.p] != "" {
			continue
		}
		if c := count[pr.m]; c >= floor {
			if c > floor || extra == 0 {
				continue
			}
			extra--
		}
		owners[pr.p] = ms[pr.m]
		count[pr.m]++
		if left--; left == 0 {
			break
		}
	}
	return owners
}

// score is the rendezvous hash of member m and partition p.
func score(m string, p int) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(m))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(strconv.Itoa(p)))
	// FNV's low bits mix poorly for keys that differ in the last byte: finish with
	// SplitMix64.
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
