package jetstream

import (
	"context"
)

// StreamStatus is what status shows of one stream.
type StreamStatus struct {
	Name     string `json:"name"`
	Messages uint64 `json:"messages"`
	Bytes    uint64 `json:"bytes"`
	Subjects int    `json:"subjects"`
	Error    string `json:"error,omitempty"`
}

// ConsumerStatus is what status shows of one consumer.
type ConsumerStatus struct {
	Stream      string `json:"stream"`
	Name        string `json:"name"`
	Pending     uint64 `json:"pending"`
	AckPending  int    `json:"ack_pending"`
	Redelivered int    `json:"redelivered"`
	Waiting     int    `json:"waiting_pulls"`
	Error       string `json:"error,omitempty"`
}

// Status is a snapshot of the pipeline's streams and consumers.
type Status struct {
	Streams   []StreamStatus   `json:"streams"`
	Consumers []ConsumerStatus `json:"consumers"`
}

// Status reads the state of every stream and consumer of the contract. Errors are
// reported per entry, so one missing stream does not hide the others.
func (s *Store) Status(ctx context.Context) Status {
	var out Status
	for _, name := range []string{s.cfg.ChatStream, s.cfg.RequestsStream, s.cfg.EventsStream, s.cfg.DeadStream,
		s.cfg.ActivityStream, "KV_" + s.cfg.ResultsBucket, "KV_" + s.cfg.PolicyBucket, objectsStream(s.cfg.ObjectsBucket), "KV_" + s.cfg.ForgetBucket} {
		ss := StreamStatus{Name: name}
		st, err := s.js.Stream(ctx, name)
		if err == nil {
			info, ierr := st.Info(ctx)
			if err = ierr; err == nil {
				ss.Messages, ss.Bytes, ss.Subjects = info.State.Msgs, info.State.Bytes, int(info.State.NumSubjects)
			}
		}
		if err != nil {
			ss.Error = err.Error()
		}
		out.Streams = append(out.Streams, ss)
	}
	for _, c := range [][2]string{{s.cfg.ChatStream, s.cfg.TriggerConsumer}, {s.cfg.ActivityStream, s.cfg.IdleConsumer},
		{s.cfg.RequestsStream, s.cfg.WorkerConsumer}} {
		cs := ConsumerStatus{Stream: c[0], Name: c[1]}
		cons, err := s.js.Consumer(ctx, c[0], c[1])
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
	return out
}
