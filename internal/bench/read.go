package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
)

// ReadReport compares the context read of a long compacted conversation (KV value +
// tail, assembled) with replaying its history through an ordered consumer, and with
// the least any reader must do (one KV get and one batched direct get).
type ReadReport struct {
	Messages     int     `json:"messages"`
	Repeats      int     `json:"repeats"`
	TailMessages int     `json:"tail_messages"`
	ReadMs       float64 `json:"read_ms"`
	ReplayMs     float64 `json:"replay_ms"`
	FloorMs      float64 `json:"floor_ms"`
	// Speedup is ReplayMs ÷ ReadMs; OverFloor is ReadMs ÷ FloorMs.
	Speedup   float64 `json:"speedup"`
	OverFloor float64 `json:"over_floor"`
}

// publishHistory publishes msgs to conv through the pipeline client and waits for
// every ack; it returns the last sequence.
func (r *rig) publishHistory(ctx context.Context, conv string, msgs []CorpusMessage) (uint64, error) {
	client := r.client()
	acks := make([]<-chan pipeline.PubAck, 0, len(msgs))
	var last uint64
	for i, m := range msgs {
		a, err := client.PublishAsync(ctx, conv, m.Message)
		if err != nil {
			return 0, fmt.Errorf("message %d: %w", i, err)
		}
		acks = append(acks, a)
		if len(acks) == asyncWindow || i == len(msgs)-1 {
			for _, a := range acks {
				ack := <-a
				if ack.Err != nil {
					return 0, ack.Err
				}
				last = max(last, ack.Seq)
			}
			acks = acks[:0]
		}
	}
	return last, nil
}

var requestIDs atomic.Int64

// compact queues a request for conv and waits for its outcome, which must be
// completed. A request the workers queued themselves (the follow-up of a compaction
// that left the conversation over its threshold) is let finish first: the queue holds
// one request per conversation.
func (r *rig) compact(ctx context.Context, conv string, upTo uint64) (schemas.Event, error) {
	id := "bench-" + strconv.FormatInt(requestIDs.Add(1), 10)
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	since := time.Now().Add(-time.Second)
	for {
		_, err := r.store.Queue().Enqueue(wctx, schemas.Request{RequestID: id, Conversation: conv, Trigger: "manual",
			Reason: "bench", RequestedAt: time.Now().UTC(), UpToSeq: upTo})
		if err == nil {
			break
		}
		if !errors.Is(err, jetstream.ErrRequestPending) {
			return schemas.Event{}, err
		}
		select {
		case <-wctx.Done():
			return schemas.Event{}, fmt.Errorf("compaction of %s: another request stayed pending: %w", conv, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	ev, err := r.store.Events().WaitOutcome(wctx, conv, id, since)
	if err != nil {
		return ev, err
	}
	if ev.Type != "completed" {
		return ev, fmt.Errorf("compaction of %s %s: %s %s", conv, ev.Type, ev.Reason, ev.Error)
	}
	return ev, nil
}

func measureRead(ctx context.Context, url string, c *Corpus, sz sizes, rep *Report, progress func(string, ...any)) error {
	rr := &rep.Read
	rr.Messages, rr.Repeats = sz.readMessages, sz.readRepeats
	r, err := newRig(ctx, url)
	if err != nil {
		return err
	}
	defer r.close()
	progress("read: publishing a conversation of %d messages", sz.readMessages)
	const conv = "long"
	last, err := r.publishHistory(ctx, conv, c.history(sz.readMessages))
	if err != nil {
		return err
	}
	llm := newFakeLLM(0, 400)
	defer llm.close()
	sum, err := llm.summarizer()
	if err != nil {
		return err
	}
	stop, err := r.startPool(ctx, settings(benchWindow), 1, sum)
	if err != nil {
		return err
	}
	defer stop()
	progress("read: compacting it")
	if _, err := r.compact(ctx, conv, last); err != nil {
		return err
	}
	client := r.client()
	cx, err := client.Context(ctx, conv)
	if err != nil {
		return err
	}
	if !cx.HasSummary {
		return errors.New("the compacted conversation reads without a summary")
	}
	rr.TailMessages = int(last - cx.TailStartSeq + 1)
	progress("read: %d reads (KV + %d tail messages) against ordered-consumer replays of %d", sz.readRepeats, rr.TailMessages, sz.readMessages)
	subj, _ := r.cfg.ChatSubject(conv)
	read, err := timeMedian(sz.readRepeats, func() error {
		_, err := client.Context(ctx, conv)
		return err
	})
	if err != nil {
		return err
	}
	replay, err := timeMedian(max(sz.readRepeats/5, 3), func() error { return r.replay(ctx, subj, sz.readMessages) })
	if err != nil {
		return err
	}
	kv, err := r.js.KeyValue(ctx, r.cfg.ResultsBucket)
	if err != nil {
		return err
	}
	floor, err := timeMedian(sz.readRepeats, func() error {
		e, err := kv.Get(ctx, conv)
		if err != nil {
			return err
		}
		var v struct {
			TailStartSeq uint64 `json:"tail_start_seq"`
		}
		if err := json.Unmarshal(e.Value(), &v); err != nil {
			return err
		}
		return r.directBatch(ctx, subj, v.TailStartSeq)
	})
	if err != nil {
		return err
	}
	rr.ReadMs, rr.ReplayMs, rr.FloorMs = ms(read), ms(replay), ms(floor)
	rr.Speedup, rr.OverFloor = rr.ReplayMs/rr.ReadMs, rr.ReadMs/rr.FloorMs
	progress("read: %.2f ms, replay %.1f ms (%.0fx), floor %.2f ms (read is %.2fx the floor)",
		rr.ReadMs, rr.ReplayMs, rr.Speedup, rr.FloorMs, rr.OverFloor)
	return nil
}

// replay reads n messages of subj with an ordered consumer, as a reader without
// Compactor would.
func (r *rig) replay(ctx context.Context, subj string, n int) error {
	cons, err := r.js.OrderedConsumer(ctx, r.cfg.ChatStream, natsjs.OrderedConsumerConfig{FilterSubjects: []string{subj}})
	if err != nil {
		return err
	}
	it, err := cons.Messages()
	if err != nil {
		return err
	}
	defer it.Stop()
	for range n {
		m, err := it.Next()
		if err != nil {
			return err
		}
		var msg schemas.Message
		if err := json.Unmarshal(m.Data(), &msg); err != nil {
			return err
		}
	}
	return nil
}

// directBatch asks for one batch (up to 256) of subj's messages from seq with a
// batched direct get and reads the answers up to the end-of-batch marker.
func (r *rig) directBatch(ctx context.Context, subj string, seq uint64) error {
	inbox := r.nc.NewRespInbox()
	sub, err := r.nc.SubscribeSync(inbox)
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	req, _ := json.Marshal(map[string]any{"seq": seq, "next_by_subj": subj, "batch": 256})
	if err := r.nc.PublishRequest("$JS.API.DIRECT.GET."+r.cfg.ChatStream, inbox, req); err != nil {
		return err
	}
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return err
		}
		if len(m.Data) == 0 && m.Header.Get("Status") != "" {
			return nil
		}
	}
}

// timeMedian runs fn n times and returns the median duration.
func timeMedian(n int, fn func() error) (time.Duration, error) {
	ds := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		if err := fn(); err != nil {
			return 0, err
		}
		ds = append(ds, time.Since(start))
	}
	return pct(ds, 50), nil
}
