package jstest

import (
	"net"
	"sync"
	"testing"
)

// Relay is a TCP relay between clients and a NATS server that can lose what the server
// sends, as a connection does in the moment it dies (the server believes it delivered,
// the client never reads it), and hold what the clients send, as a stalled network
// does.
type Relay struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	muted  bool
	paused bool
	resume *sync.Cond
	conns  []net.Conn
}

// NewRelay relays connections made to its URL to target (host:port) until cleanup.
func NewRelay(t testing.TB, target string) *Relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("jstest: relay: %v", err)
	}
	r := &Relay{ln: ln, target: target}
	r.resume = sync.NewCond(&r.mu)
	go r.accept()
	t.Cleanup(r.close)
	return r
}

// URL is what clients connect to.
func (r *Relay) URL() string { return "nats://" + r.ln.Addr().String() }

// Mute drops, from now on, what the server sends to the clients (their own bytes still
// reach the server), or passes it again.
func (r *Relay) Mute(on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.muted = on
}

// Pause holds, from now on, what the clients send (nothing is lost: it is passed on
// once paused is false again), or lets it go.
func (r *Relay) Pause(on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.paused = on
	if !on {
		r.resume.Broadcast()
	}
}

// Break closes every relayed connection, as a dying server or network does; clients
// that reconnect get a relay that passes everything.
func (r *Relay) Break() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.conns {
		_ = c.Close()
	}
	r.conns, r.muted, r.paused = nil, false, false
	r.resume.Broadcast()
}

func (r *Relay) close() {
	_ = r.ln.Close()
	r.Break()
}

func (r *Relay) accept() {
	for {
		in, err := r.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", r.target)
		if err != nil {
			_ = in.Close()
			continue
		}
		r.mu.Lock()
		r.conns = append(r.conns, in, out)
		r.mu.Unlock()
		go func() {
			defer out.Close()
			buf := make([]byte, 32<<10)
			for {
				n, err := in.Read(buf)
				r.mu.Lock()
				for r.paused {
					r.resume.Wait()
				}
				r.mu.Unlock()
				if n > 0 {
					if _, werr := out.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
		go func() {
			defer in.Close()
			buf := make([]byte, 32<<10)
			for {
				n, err := out.Read(buf)
				r.mu.Lock()
				muted := r.muted
				r.mu.Unlock()
				if n > 0 && !muted {
					if _, werr := in.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
}
