package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/pipeline"
)

// publishRounds is how many times each side of the publish comparison runs,
// alternately; the median of each is reported.
const publishRounds = 3

// publishAlone compares the pipeline client's publishing with raw asynchronous
// publishing, each with nothing else running (no trigger, no workers, no consumer
// taking messages: each stream has one idle durable consumer, as CHAT has the
// trigger's), the same payloads and the same window in flight; the rounds alternate so
// the two see the same machine. It returns the medians, messages/s until every
// publish is acknowledged.
func publishAlone(ctx context.Context, url string, load []published) (raw, client float64, err error) {
	var raws, clients []time.Duration
	for range publishRounds {
		d, err := rawPublishOnly(ctx, url, load)
		if err != nil {
			return 0, 0, fmt.Errorf("raw: %w", err)
		}
		raws = append(raws, d)
		if d, err = clientPublishOnly(ctx, url, load); err != nil {
			return 0, 0, fmt.Errorf("client: %w", err)
		}
		clients = append(clients, d)
	}
	n := float64(len(load))
	return n / pct(raws, 50).Seconds(), n / pct(clients, 50).Seconds(), nil
}

// rawPublishOnly publishes load asynchronously to a plain stream shaped like CHAT and
// times it until every publish is acknowledged.
func rawPublishOnly(ctx context.Context, url string, load []published) (time.Duration, error) {
	r, err := newRig(ctx, url)
	if err != nil {
		return 0, err
	}
	defer r.close()
	js, err := natsjs.New(r.nc, natsjs.WithPublishAsyncMaxPending(asyncWindow))
	if err != nil {
		return 0, err
	}
	s, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: "RAW_" + r.ns, Subjects: []string{r.ns + ".raw.*.msg"},
		Storage: natsjs.FileStorage, AllowDirect: true, Duplicates: 2 * time.Minute})
	if err != nil {
		return 0, err
	}
	if _, err := s.CreateOrUpdateConsumer(ctx, natsjs.ConsumerConfig{Durable: "idle", AckPolicy: natsjs.AckExplicitPolicy}); err != nil {
		return 0, err
	}
	start := time.Now()
	for _, p := range load {
		if _, err := js.PublishAsync(fmt.Sprintf("%s.raw.c%d.msg", r.ns, p.conv), p.msg.Payload, natsjs.WithStallWait(rawStallWait)); err != nil {
			return 0, err
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(5 * time.Minute):
		return 0, errors.New("publishes not acked within 5m")
	}
	return time.Since(start), nil
}

// clientPublishOnly publishes load through the pipeline client (PublishBatch) into a
// fresh namespace where nothing runs, and times it until every publish is
// acknowledged.
func clientPublishOnly(ctx context.Context, url string, load []published) (time.Duration, error) {
	r, err := newRig(ctx, url)
	if err != nil {
		return 0, err
	}
	defer r.close()
	client := r.client()
	start := time.Now()
	if err := publishInOrder(ctx, client, load); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// publishInOrder publishes load through client's PublishBatch, with at most
// asyncWindow publishes unacknowledged, until every one is acknowledged or one fails.
// Its conversations' names are made inside the timed part, as the raw baseline makes
// its subjects.
func publishInOrder(ctx context.Context, client *pipeline.Client, load []published) error {
	msgs := make([]pipeline.BatchMsg, len(load))
	for i, p := range load {
		msgs[i] = pipeline.BatchMsg{Conv: "c" + strconv.Itoa(p.conv), Message: p.msg.Message}
	}
	_, err := client.PublishBatch(ctx, msgs, pipeline.BatchOptions{Window: asyncWindow})
	return err
}
