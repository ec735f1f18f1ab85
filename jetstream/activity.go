package jetstream

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// Activity is the handle on ACTIVITY, the conversations' idle timers: it arms them and
// runs the trigger's idle consumers. Store.Activity returns it.
type Activity struct{ *core }

// ArmIdle (re-)arms a conversation's idle timer: a message on activity.<conv> with a
// TTL. When the TTL runs out, the server leaves a delete marker, which Consume
// delivers as the idle signal, also after a restart. seq is the newest chat sequence
// the timer knows of (informational).
func (ac *Activity) ArmIdle(conv string, ttl time.Duration, seq uint64) error {
	subj, err := ac.cfg.ActivitySubject(conv)
	if err != nil {
		return err
	}
	ttl = max(ttl.Round(time.Second), time.Second)
	m := nats.NewMsg(subj)
	m.Header.Set(natsjs.MsgTTLHeader, ttl.String())
	m.Data = fmt.Appendf(nil, `{"seq":%d}`, seq)
	if err := ac.nc.PublishMsg(m); err != nil {
		return fmt.Errorf("arm the idle timer of %s: %w", conv, err)
	}
	return nil
}

// ArmRecount replaces the conversation's idle timer with one that runs out after ttl
// (at least a second), and returns once ACTIVITY stored it: its marker reaches the
// trigger that owns the conversation then as an idle signal, also after a crash or a
// takeover, and the trigger counts the conversation again from the stream (and re-arms
// its idle timer). A trigger uses it for a chat message it acknowledged before handling
// it (see Consumption.AcksAll).
func (ac *Activity) ArmRecount(ctx context.Context, conv string, ttl time.Duration, seq uint64) error {
	subj, err := ac.cfg.ActivitySubject(conv)
	if err != nil {
		return err
	}
	m := nats.NewMsg(subj)
	m.Header.Set(natsjs.MsgTTLHeader, max(ttl.Round(time.Second), time.Second).String())
	m.Header.Set(natsjs.ExpectedStreamHeader, ac.cfg.ActivityStream)
	m.Data = fmt.Appendf(nil, `{"seq":%d,"recount":true}`, seq)
	if _, err := ac.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("arm a recount of %s: %w", conv, err)
	}
	return nil
}

// markerReasonHeader is set on the delete marker a message's expiry leaves.
const markerReasonHeader = "Nats-Marker-Reason"

// IsIdleSignal reports whether an ACTIVITY delivery is the marker an expired idle timer
// left (the timer messages themselves are not).
func (d *Delivery) IsIdleSignal() bool { return d.Header(markerReasonHeader) != "" }

// Consume delivers ACTIVITY to the active trigger, like Chat.Consume.
func (ac *Activity) Consume(ctx context.Context, handle func(*Delivery), onErr func(error)) (*Consumption, error) {
	return ac.ConsumePartition(ctx, Partition{N: 1}, handle, onErr)
}
