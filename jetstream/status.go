package jetstream

import (
	"context"
	"errors"

	natsjs "github.com/nats-io/nats.go/jetstream"
)

// StreamStatus is what status shows of one stream.
type StreamStatus struct {
	Name     string `json:"name"`
	Messages uint64 `json:"messages"`
	Bytes    uint64 `json:"bytes"`
	Subjects int    `json:"subjects"`
	Error    string `json:"error,omitempty"`
	// Note says why an optional stream is not there (the savings ledger).
	Note string `json:"note,omitempty"`
}

// ConsumerStatus is what status shows of one consumer.
type ConsumerStatus struct {
	Stream      string `json:"stream"`
	Name        string `json:"name"`
	Pending     uint64 `json:"pending"`
	AckPending  int    `json:"ack_pending"`
	Redelivered int    `json:"redelivered"`
	Waiting     int    `json:"waiting_pulls"`
	// Partition (p/N) and Owner, the member the assignment gives it to, for the
	// consumers of a partitioned trigger.
	Partition string `json:"partition,omitempty"`
	Owner     string `json:"owner,omitempty"`
	Error     string `json:"error,omitempty"`
}

// Status is a snapshot of the pipeline's streams and consumers.
type Status struct {
	Streams   []StreamStatus   `json:"streams"`
	Consumers []ConsumerStatus `json:"consumers"`
	// TriggerMembers are the live trigger processes of a partitioned trigger;
	// TriggerMembersError says why they could not be read.
	TriggerMembers      []string `json:"trigger_members,omitempty"`
	TriggerMembersError string   `json:"trigger_members_error,omitempty"`
	// LearnedWindows are the summarizer windows the workers learned of their endpoints
	// (see Windows); LearnedWindowsError says why they could not be read.
	LearnedWindows      []LearnedWindow `json:"learned_windows,omitempty"`
	LearnedWindowsError string          `json:"learned_windows_error,omitempty"`
	// PolicyDisagreements are the policy keys on which the roles of the deployment
	// recorded different defaults (see Store.RecordPolicy), one line each;
	// PolicyRecordsError says why the records could not be read (none when the
	// deployment bucket is not there).
	PolicyDisagreements []string `json:"policy_disagreements,omitempty"`
	PolicyRecordsError  string   `json:"policy_records_error,omitempty"`
	// Durability is whether the servers sync every write to disk (see
	// ReadDurability), when the caller read it.
	Durability *Durability `json:"durability,omitempty"`
}

// Status reads the state of every stream and consumer of the contract. Errors are
// reported per entry, so one missing stream does not hide the others.
func (s *Store) Status(ctx context.Context) Status {
	var out Status
	for _, name := range []string{s.cfg.ChatStream, s.cfg.RequestsStream, s.cfg.EventsStream, s.cfg.DeadStream,
		s.cfg.ActivityStream, "KV_" + s.cfg.ResultsBucket, "KV_" + s.cfg.PolicyBucket, objectsStream(s.cfg.ObjectsBucket), "KV_" + s.cfg.ForgetBucket} {
		ss, err := s.streamStatus(ctx, name)
		if err != nil {
			ss.Error = err.Error()
		}
		out.Streams = append(out.Streams, ss)
	}
	if name := s.cfg.LedgerStream; name != "" {
		ss, err := s.streamStatus(ctx, name)
		switch {
		case errors.Is(err, natsjs.ErrStreamNotFound):
			ss.Note = "optional, not created: the proxy books no savings"
		case err != nil:
			ss.Error = err.Error()
		}
		out.Streams = append(out.Streams, ss)
	}
	type consumer struct {
		stream, name string
		part         Partition
	}
	var consumers []consumer
	for _, p := range s.cfg.Partitions() {
		consumers = append(consumers, consumer{s.cfg.ChatStream, s.cfg.TriggerConsumerOf(p), p}, consumer{s.cfg.ActivityStream, s.cfg.IdleConsumerOf(p), p})
	}
	consumers = append(consumers, consumer{stream: s.cfg.RequestsStream, name: s.cfg.WorkerConsumer})
	var owners []string
	if s.cfg.TriggerPartitions > 1 {
		members, err := s.triggerMembers(ctx)
		if err != nil {
			out.TriggerMembersError = err.Error()
		} else {
			out.TriggerMembers = members
			owners = AssignPartitions(members, s.cfg.TriggerPartitions)
		}
	}
	for _, c := range consumers {
		cs := ConsumerStatus{Stream: c.stream, Name: c.name}
		if c.part.Partitioned() {
			cs.Partition = c.part.String()
			if owners != nil {
				cs.Owner = owners[c.part.P]
			}
		}
		cons, err := s.js.Consumer(ctx, c.stream, c.name)
		if err == nil {
			info, ierr := cons.Info(ctx)
			if err = ierr; err == nil {
				cs.Pending, cs.AckPending, cs.Redelivered, cs.Waiting = info.NumPending, info.NumAckPending, info.NumRedelivered, info.NumWaiting
			}
		}
		if err != nil {
			cs.Error = err.Error()
		}
		out.Consumers = append(out.Consumers, cs)
	}
	var werr error
	if out.LearnedWindows, werr = s.Windows().List(ctx); werr != nil {
		out.LearnedWindowsError = werr.Error()
	}
	pctx, cancel := context.WithTimeout(ctx, policyReadTimeout)
	rp, perr := s.RolePolicies(pctx)
	cancel()
	switch {
	case perr == nil:
		out.PolicyDisagreements = PolicyDisagreements(rp)
	case !errors.Is(perr, ErrNoDeploymentBucket):
		out.PolicyRecordsError = perr.Error()
	}
	return out
}

// streamStatus reads one stream's figures; an error leaves them 0.
func (s *Store) streamStatus(ctx context.Context, name string) (StreamStatus, error) {
	ss := StreamStatus{Name: name}
	st, err := s.js.Stream(ctx, name)
	if err != nil {
		return ss, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return ss, err
	}
	ss.Messages, ss.Bytes, ss.Subjects = info.State.Msgs, info.State.Bytes, int(info.State.NumSubjects)
	return ss, nil
}

func (s *Store) triggerMembers(ctx context.Context) ([]string, error) {
	m, err := s.Membership(ctx)
	if err != nil {
		return nil, err
	}
	return m.Members(ctx)
}
