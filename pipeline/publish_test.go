package pipeline_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
)

// silencer relays one client's TCP connection to the server and can stop passing the
// server's bytes back: the client's publishes reach the server, its acks never return.
type silencer struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	muted  bool
	conns  []net.Conn
}

func newSilencer(t *testing.T, target string) *silencer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &silencer{ln: ln, target: target}
	t.Cleanup(s.close)
	go s.accept()
	return s
}

func (s *silencer) url() string { return "nats://" + s.ln.Addr().String() }

func (s *silencer) mute() {
	s.mu.Lock()
	s.muted = true
	s.mu.Unlock()
}

func (s *silencer) accept() {
	for {
		in, err := s.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", s.target)
		if err != nil {
			in.Close()
			return
		}
		s.mu.Lock()
		s.conns = append(s.conns, in, out)
		s.mu.Unlock()
		go func() { _, _ = io.Copy(out, in) }()
		go func() {
			buf := make([]byte, 32*1024)
			for {
				n, err := out.Read(buf)
				if err != nil {
					in.Close()
					return
				}
				s.mu.Lock()
				muted := s.muted
				s.mu.Unlock()
				if !muted {
					if _, err := in.Write(buf[:n]); err != nil {
						return
					}
				}
			}
		}()
	}
}

func (s *silencer) close() {
	s.ln.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		c.Close()
	}
}

// Crack 7: an asynchronous publish whose ack never comes (the connection went quiet,
// then closed) still yields its outcome: the caller's context ends the wait.
func TestPublishAsyncAlwaysResolves(t *testing.T) {
	srv := jstest.Server(t)
	jstest.Provision(t, jstest.Conn(t, srv))
	relay := newSilencer(t, srv.NATS().Addr().String())
	nc, err := nats.Connect(relay.url(), nats.MaxReconnects(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c, err := pipeline.New(ctxT(t), nc)
	if err != nil {
		t.Fatal(err)
	}
	msg := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("hello")}
	ack, err := c.PublishAsync(ctxT(t), "quiet", msg)
	if err != nil {
		t.Fatal(err)
	}
	if a := <-ack; a.Err != nil || a.Seq == 0 {
		t.Fatalf("first publish = %+v; want stored", a)
	}
	relay.mute()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	ack, err = c.PublishAsync(ctx, "quiet", msg)
	if err != nil {
		t.Fatal(err)
	}
	nc.Close() // nats.go resolves no pending future once the connection is closed
	select {
	case a := <-ack:
		if !errors.Is(a.Err, context.DeadlineExceeded) {
			t.Fatalf("publish without an ack = %+v; want the caller's deadline", a)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("PublishAsync never yielded an outcome")
	}
}
