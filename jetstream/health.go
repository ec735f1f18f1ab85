package jetstream

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"
)

// ErrDisconnected is Ping's answer while the store's connection is not connected
// (reconnecting, closed): nothing is asked of the server then.
var ErrDisconnected = errors.New("nats connection is not connected")

// Ping asks JetStream for the work queue's stream info: a cheap call that only a
// working JetStream answers (in a cluster, the stream's leader), and one every serve
// role may make (account info is not among the rights of deploy/nats/accounts.conf's
// users). A connection that is not connected fails at once.
func (s *Store) Ping(ctx context.Context) error {
	if st := s.nc.Status(); st != nats.CONNECTED {
		return fmt.Errorf("%w (%s)", ErrDisconnected, st)
	}
	if _, err := s.js.Stream(ctx, s.cfg.RequestsStream); err != nil {
		return fmt.Errorf("jetstream: stream %s: %w", s.cfg.RequestsStream, err)
	}
	return nil
}

// Backlog is what a durable consumer has not finished: messages not yet delivered
// (Waiting) and delivered but not acknowledged yet (InProgress).
type Backlog struct {
	Waiting    uint64
	InProgress uint64
}

// Backlog is the backlog of the workers' consumer on the work queue: requests
// queued and not taken yet, and requests a worker holds.
func (qu *Queue) Backlog(ctx context.Context) (Backlog, error) {
	return qu.backlog(ctx, qu.cfg.RequestsStream, qu.cfg.WorkerConsumer)
}

// backlogConcurrency bounds the consumer infos Chat.Backlog asks for at once.
const backlogConcurrency = 8

// Backlog is the summed backlog of the trigger consumers on CHAT of parts: the
// chat messages no trigger has counted yet. A process passes the partitions it runs,
// so the sum over the processes is the whole backlog.
func (ch *Chat) Backlog(ctx context.Context, parts []Partition) (Backlog, error) {
	var (
		mu   sync.Mutex
		sum  Backlog
		errs []error
		wg   sync.WaitGroup
		sem  = make(chan struct{}, backlogConcurrency)
	)
	for _, p := range parts {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			b, err := ch.backlog(ctx, ch.cfg.ChatStream, ch.cfg.TriggerConsumerOf(p))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			sum.Waiting += b.Waiting
			sum.InProgress += b.InProgress
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return Backlog{}, errors.Join(errs...)
	}
	return sum, nil
}

func (s *core) backlog(ctx context.Context, stream, consumer string) (Backlog, error) {
	if st := s.nc.Status(); st != nats.CONNECTED {
		return Backlog{}, fmt.Errorf("%w (%s)", ErrDisconnected, st)
	}
	c, err := s.js.Consumer(ctx, stream, consumer)
	if err != nil {
		return Backlog{}, fmt.Errorf("consumer %s on %s: %w", consumer, stream, err)
	}
	info := c.CachedInfo()
	return Backlog{Waiting: info.NumPending, InProgress: uint64(max(info.NumAckPending, 0))}, nil
}
