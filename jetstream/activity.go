package jetstream

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// ArmIdle (re-)arms a conversation's idle timer: a message on activity.<conv> with a
// TTL. When the TTL runs out, the server leaves a delete marker, which ConsumeIdle
// delivers as the idle signal, also after a restart. seq is the newest chat sequence
// the timer knows of (informational).
func (s *Store) ArmIdle(conv string, ttl time.Duration, seq uint64) error {
	subj, err := s.cfg.ActivitySubject(conv)
	if err != nil {
		return err
	}
	ttl = max(ttl.Round(time.Second), time.Second)
	m := nats.NewMsg(subj)
	m.Header.Set(natsjs.MsgTTLHeader, ttl.String())
	m.Data = fmt.Appendf(nil, `{"seq":%d}`, seq)
	if err := s.nc.PublishMsg(m); err != nil {
		return fmt.Errorf("arm the idle timer of %s: %w", conv, err)
	}
	return nil
}

// markerReasonHeader is set on the delete marker a message's expiry leaves.
const markerReasonHeader = "Nats-Marker-Reason"

// IsIdleSignal reports whether an ACTIVITY delivery is the marker an expired idle timer
// left (the timer messages themselves are not).
func (d *Delivery) IsIdleSignal() bool { return d.Header(markerReasonHeader) != "" }

// ConsumeIdle delivers ACTIVITY to the active trigger, like ConsumeChat.
func (s *Store) ConsumeIdle(ctx context.Context, handle func(*Delivery), onErr func(error)) (*Consumption, error) {
	return s.ConsumeIdlePartition(ctx, Partition{N: 1}, handle, onErr)
}
