package jetstream

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
)

// ErrConflict is matched by the error Provision returns when existing streams, buckets
// or consumers differ from the config. Nothing was changed; the error is a
// *ConflictError listing every difference.
var ErrConflict = errors.New("existing jetstream settings differ from this process's config")

// Difference is one setting of an existing stream, bucket or consumer that differs from
// what the config asks for.
type Difference struct {
	Kind     string // stream, bucket or consumer
	Name     string // CHAT, compaction, CHAT/compactor-trigger
	Setting  string // max_age, replicas, history, ...
	Existing string
	Wanted   string
	// Fixed settings (storage, retention, ...) cannot be changed in place, not even
	// with Config.UpdateExisting.
	Fixed bool
}

func (d Difference) String() string {
	s := fmt.Sprintf("%s %s: %s is %s, this process wants %s", d.Kind, d.Name, d.Setting, d.Existing, d.Wanted)
	if d.Fixed {
		s += " (cannot be changed in place)"
	}
	return s
}

// ConflictError lists the differences Provision found and left alone.
type ConflictError struct {
	Differences []Difference
}

func (e *ConflictError) Error() string {
	parts := make([]string, len(e.Differences))
	for i, d := range e.Differences {
		parts[i] = d.String()
	}
	return fmt.Sprintf("%v, kept as they are: %s", ErrConflict, strings.Join(parts, "; "))
}

// Is makes errors.Is(err, ErrConflict) hold.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// fixedDiffs returns the differences that cannot be applied in place.
func fixedDiffs(ds []Difference) []Difference {
	var out []Difference
	for _, d := range ds {
		if d.Fixed {
			out = append(out, d)
		}
	}
	return out
}

// differ collects the differences of one stream, bucket or consumer.
type differ struct {
	kind, name string
	out        []Difference
}

func (d *differ) check(setting string, existing, wanted any, fixed bool) {
	e, w := show(existing), show(wanted)
	if e != w {
		d.out = append(d.out, Difference{Kind: d.kind, Name: d.name, Setting: setting, Existing: e, Wanted: w, Fixed: fixed})
	}
}

// show formats a setting the way the server normalises it.
func show(v any) string {
	switch v := v.(type) {
	case age:
		if v == 0 {
			return "0s (kept forever)"
		}
		return time.Duration(v).String()
	case []string:
		s := slices.Clone(v)
		slices.Sort(s)
		return "[" + strings.Join(s, " ") + "]"
	case transform:
		return showTransform(v)
	case limit:
		if v <= 0 {
			return "unlimited"
		}
		return strconv.FormatInt(int64(v), 10)
	case fmt.Stringer:
		return v.String()
	}
	return fmt.Sprint(v)
}

// age is a retention time where 0 means forever.
type age time.Duration

// limit is a count where 0 and -1 both mean unlimited.
type limit int64

// streamDiff compares the settings of want (what Provision asks for) with have (the
// existing stream). Settings Provision leaves at the server's default are not compared,
// nor is the description.
func streamDiff(want, have natsjs.StreamConfig) []Difference {
	d := &differ{kind: "stream", name: want.Name}
	d.check("subjects", have.Subjects, want.Subjects, false)
	d.check("retention", have.Retention, want.Retention, true)
	d.check("storage", have.Storage, want.Storage, true)
	d.check("replicas", have.Replicas, want.Replicas, false)
	d.check("max_age", age(have.MaxAge), age(want.MaxAge), false)
	if want.Duplicates != 0 {
		d.check("duplicate_window", have.Duplicates, want.Duplicates, false)
	}
	d.check("max_msgs_per_subject", limit(have.MaxMsgsPerSubject), limit(want.MaxMsgsPerSubject), false)
	if want.MaxBytes != 0 { // CHAT's (a tenant's stored_bytes quota); the others leave it to the operator
		d.check("max_bytes", limit(have.MaxBytes), limit(want.MaxBytes), false)
	}
	d.check("discard", have.Discard, want.Discard, false)
	d.check("discard_new_per_subject", have.DiscardNewPerSubject, want.DiscardNewPerSubject, false)
	d.check("allow_direct", have.AllowDirect, want.AllowDirect, false)
	d.check("allow_msg_ttl", have.AllowMsgTTL, want.AllowMsgTTL, false)
	d.check("subject_delete_marker_ttl", have.SubjectDeleteMarkerTTL, want.SubjectDeleteMarkerTTL, false)
	// The partition layout (COMPACTOR_TRIGGER_PARTITIONS): a process with another
	// count would consume partitions no one else does.
	d.check("subject_transform", transform(have.SubjectTransform), transform(want.SubjectTransform), false)
	return d.out
}

// mergeStream is have with the settings streamDiff compares set to want's, so an update
// changes nothing else an operator may have set.
func mergeStream(want, have natsjs.StreamConfig) natsjs.StreamConfig {
	m := have
	m.Description = want.Description
	m.Subjects = want.Subjects
	m.Replicas = want.Replicas
	m.MaxAge = want.MaxAge
	if want.Duplicates != 0 {
		m.Duplicates = want.Duplicates
	}
	m.MaxMsgsPerSubject = want.MaxMsgsPerSubject
	if want.MaxBytes != 0 {
		m.MaxBytes = want.MaxBytes
	}
	m.Discard = want.Discard
	m.DiscardNewPerSubject = want.DiscardNewPerSubject
	m.AllowDirect = want.AllowDirect
	m.AllowMsgTTL = want.AllowMsgTTL
	m.SubjectDeleteMarkerTTL = want.SubjectDeleteMarkerTTL
	m.SubjectTransform = want.SubjectTransform
	return m
}

// transform shows a stream subject transform.
type transform *natsjs.SubjectTransformConfig

func showTransform(t transform) string {
	if t == nil || (t.Source == "" && t.Destination == "") {
		return "none (one trigger partition)"
	}
	return t.Source + " → " + t.Destination
}

// bucketDiff compares a bucket's config with the stream that backs it.
func bucketDiff(want natsjs.KeyValueConfig, have natsjs.StreamConfig) []Difference {
	d := &differ{kind: "bucket", name: want.Bucket}
	d.check("history", limit(have.MaxMsgsPerSubject), limit(want.History), false)
	d.check("ttl", age(have.MaxAge), age(want.TTL), false)
	d.check("storage", have.Storage, want.Storage, true)
	d.check("replicas", have.Replicas, want.Replicas, false)
	return d.out
}

// objectStoreDiff compares an object store's config with the stream that backs it.
// Roll-ups are not compared here: an object store that allows them is an upgrade the
// provisioner leaves pending (see provisioner.objectStore).
func objectStoreDiff(want natsjs.StreamConfig, have natsjs.StreamConfig) []Difference {
	d := &differ{kind: "object store", name: strings.TrimPrefix(want.Name, "OBJ_")}
	d.check("ttl", age(have.MaxAge), age(want.MaxAge), false)
	d.check("storage", have.Storage, want.Storage, true)
	d.check("replicas", have.Replicas, want.Replicas, false)
	if want.MaxBytes > 0 { // a tenant's stored_bytes quota; otherwise the operator's
		d.check("max_bytes", limit(have.MaxBytes), limit(want.MaxBytes), false)
		d.check("discard", have.Discard, want.Discard, false)
	}
	return d.out
}

// consumerDiff compares the settings Provision sets on a durable consumer.
func consumerDiff(stream string, want, have natsjs.ConsumerConfig) []Difference {
	d := &differ{kind: "consumer", name: stream + "/" + want.Durable}
	d.check("filter_subject", have.FilterSubject, want.FilterSubject, false)
	d.check("deliver_policy", have.DeliverPolicy, want.DeliverPolicy, true)
	d.check("ack_policy", have.AckPolicy, want.AckPolicy, true)
	d.check("ack_wait", have.AckWait, want.AckWait, false)
	d.check("max_deliver", limit(have.MaxDeliver), limit(want.MaxDeliver), false)
	d.check("max_ack_pending", limit(have.MaxAckPending), limit(want.MaxAckPending), false)
	d.check("priority_policy", have.PriorityPolicy, want.PriorityPolicy, true)
	d.check("priority_groups", have.PriorityGroups, want.PriorityGroups, false)
	d.check("pinned_ttl", have.PinnedTTL, want.PinnedTTL, false)
	d.check("replicas", replicas(have.Replicas), replicas(want.Replicas), false)
	return d.out
}

// replicas of a consumer: 0 means as many as its stream.
type replicas int

func (r replicas) String() string {
	if r == 0 {
		return "the stream's"
	}
	return strconv.Itoa(int(r))
}

// mergeConsumer is have with the settings consumerDiff compares set to want's.
func mergeConsumer(want, have natsjs.ConsumerConfig) natsjs.ConsumerConfig {
	m := have
	m.Description = want.Description
	m.FilterSubject = want.FilterSubject
	m.AckWait = want.AckWait
	m.MaxDeliver = want.MaxDeliver
	m.MaxAckPending = want.MaxAckPending
	m.PriorityGroups = want.PriorityGroups
	m.PinnedTTL = want.PinnedTTL
	m.Replicas = want.Replicas
	return m
}
