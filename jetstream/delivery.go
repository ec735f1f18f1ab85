package jetstream

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// Delivery is one message a durable consumer delivered: a chat message or an idle
// marker to the trigger, a compaction request to a worker. It carries what the
// consumer's metadata says, and the conversation named by its subject; settling it
// (ack, nak, term, in progress) is this package's protocol.
type Delivery struct {
	msg natsjs.Msg
	nc  *nats.Conn
	// Subject is the subject the message is stored on: the one it was published on, or
	// its transform in a partitioned layout (chat.<conv>.msg.<N>.<p>).
	Subject string
	// Conversation is the id the subject names; "" when the subject's id breaks the id
	// rule (the payload must then not be read).
	Conversation string
	// Seq is the stream sequence; Attempt the number of deliveries so far (1 first).
	Seq     uint64
	Attempt uint64
	// ConsumerSeq is the consumer's delivery sequence: one more for each delivery to
	// any of its clients, so the deliveries one client gets are consecutive while it is
	// the only one given messages and nothing is lost on the way.
	ConsumerSeq uint64
	// Time is when the message was stored.
	Time time.Time
	// MetadataErr is set when the delivery had no JetStream metadata (Seq and Attempt
	// are then 0).
	MetadataErr error
	// AcksAll: the consumer's ack policy is all (see Consumption.AcksAll), so Ack
	// acknowledges every message delivered before this one too.
	AcksAll bool
	// Slot is the consumer's own bookkeeping of the delivery (a trigger's batched
	// acknowledgements); this package never reads it.
	Slot any
}

func (s *core) delivery(msg natsjs.Msg, convOf func(string) (string, bool)) *Delivery {
	d := &Delivery{msg: msg, nc: s.nc, Subject: msg.Subject()}
	d.Conversation, _ = convOf(d.Subject)
	md, err := msg.Metadata()
	if err != nil {
		d.MetadataErr = err
		return d
	}
	d.Seq, d.Attempt, d.ConsumerSeq, d.Time = md.Sequence.Stream, md.NumDelivered, md.Sequence.Consumer, md.Timestamp
	return d
}

// Data is the payload.
func (d *Delivery) Data() []byte { return d.msg.Data() }

// Header returns one header value of the message.
func (d *Delivery) Header(key string) string { return d.msg.Headers().Get(key) }

// HeaderKeys returns the names of the message's headers.
func (d *Delivery) HeaderKeys() []string {
	h := d.msg.Headers()
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}

// HeaderCarrier reads a delivery's headers the way an OpenTelemetry propagator asks
// (Get, Set, Keys: propagation.TextMapCarrier, which this package need not import).
// NATS headers are case-sensitive; the W3C names are lower case, and a producer that
// capitalised them is heard too. Set does nothing: a delivery is only read.
type HeaderCarrier struct{ d *Delivery }

// Carrier returns the delivery's headers as a HeaderCarrier.
func (d *Delivery) Carrier() HeaderCarrier { return HeaderCarrier{d} }

// Get returns the header key, matched exactly or else without regard to case.
func (c HeaderCarrier) Get(key string) string {
	if v := c.d.Header(key); v != "" {
		return v
	}
	for _, k := range c.d.HeaderKeys() {
		if strings.EqualFold(k, key) {
			return c.d.Header(k)
		}
	}
	return ""
}

// Set does nothing: a delivery's headers are only read.
func (HeaderCarrier) Set(string, string) {}

// Keys returns the names of the delivery's headers.
func (c HeaderCarrier) Keys() []string { return c.d.HeaderKeys() }

// Ack acknowledges the delivery without waiting for the server: the cheap ack of the
// trigger's hot path (a lost ack means one redelivery, which the trigger's watermark
// ignores).
func (d *Delivery) Ack() error { return d.msg.Ack() }

// FlushAcks returns once the server has received every acknowledgement sent on the
// store's connection so far (Ack does not wait): a stopping consumer calls it after
// its last message, so its acks are not left in the client's buffer.
func (s *Store) FlushAcks(ctx context.Context) error { return s.nc.FlushWithContext(ctx) }

// AckSync acknowledges the delivery and waits until the server confirmed it, so the
// slot of a work-queue request is free when it returns.
func (d *Delivery) AckSync(ctx context.Context) error { return d.msg.DoubleAck(ctx) }

// InProgress tells the server the delivery is still being worked on, resetting its
// ack wait.
func (d *Delivery) InProgress() error { return d.msg.InProgress() }

// NakAfter asks for a redelivery after delay, and waits until the consumer's leader
// confirmed it (see settle).
func (d *Delivery) NakAfter(ctx context.Context, delay time.Duration) error {
	return d.settle(ctx, fmt.Appendf(nil, "-NAK {\"delay\": %d}", max(delay, 0).Nanoseconds()))
}

// Term ends the delivery for good with a reason (at most 512 bytes are kept), and waits
// until the consumer's leader confirmed it.
func (d *Delivery) Term(ctx context.Context, reason string) error {
	return d.settle(ctx, []byte("+TERM "+TruncateUTF8(reason, 512)))
}

// settleAttempts bounds the tries of settle: enough to outlast a leader election.
const settleAttempts = 6

// settle sends an acknowledgement (a nak with its delay, or a term) as a request and
// retries until the consumer's leader confirms it. A fire-and-forget nak is lost while
// the consumer has no leader (a server died), and the message would then wait for the
// whole ack wait before it is delivered again.
func (d *Delivery) settle(ctx context.Context, body []byte) error {
	var err error
	for attempt := 1; attempt <= settleAttempts; attempt++ {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err = d.nc.RequestWithContext(actx, d.msg.Reply(), body)
		cancel()
		if err == nil {
			return nil
		}
		t := time.NewTimer(time.Duration(attempt) * 250 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
	return err
}

// TruncateUTF8 cuts s to at most n bytes without splitting a UTF-8 character.
func TruncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}
