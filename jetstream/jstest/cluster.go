package jstest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// ClusterReadyTimeout bounds how long StartCluster waits for the servers to form a
// cluster and elect a JetStream meta leader.
const ClusterReadyTimeout = 30 * time.Second

// Cluster is n in-process nats-servers with JetStream forming one cluster.
//
// Every route connection one server opens to another runs through a link (a TCP relay)
// of that pair, so a test can cut a server off the others at once, as a crash or a
// network partition does, instead of the graceful hand-over of Shutdown.
type Cluster struct {
	Servers []*server.Server
	links   []*link
}

// StartCluster starts n servers, each with its own store directory, a free client port
// and a free cluster port on 127.0.0.1, a shared cluster name and a unique server name
// (compactor-test-1, ...). Each server is configured with routes to all the others (as
// a production config lists its peers), through the links. It returns once every server
// accepts clients and a JetStream meta leader sees all n as current peers; everything
// shuts down at cleanup.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	if n < 2 {
		t.Fatalf("jstest.StartCluster: need at least 2 servers, got %d", n)
	}
	const name = "compactor-test"
	c := &Cluster{}
	// Servers only ever connect through the links: a route they learn by gossip (to the
	// advertised address) goes to a sink that hangs up, so none bypasses the links.
	sink := newSink(t)
	routes := make([][]*url.URL, n)
	for from := range n {
		for to := range n {
			if from == to {
				continue
			}
			l := newLink(t, from, to)
			c.links = append(c.links, l)
			routes[from] = append(routes[from], &url.URL{Scheme: "nats-route", Host: l.ln.Addr().String()})
		}
	}
	for i := range n {
		o := &server.Options{
			ServerName: fmt.Sprintf("%s-%d", name, i+1),
			Host:       "127.0.0.1",
			Port:       -1,
			JetStream:  true,
			StoreDir:   t.TempDir(),
			NoLog:      true,
			NoSigs:     true,
			Cluster: server.ClusterOpts{Name: name, Host: "127.0.0.1", Port: -1,
				Advertise: sink.Addr().String()},
			Routes: routes[i],
		}
		s, err := server.NewServer(o)
		if err != nil {
			t.Fatalf("jstest.StartCluster: server %s: %v", o.ServerName, err)
		}
		s.Start()
		t.Cleanup(func() {
			s.Shutdown()
			s.WaitForShutdown()
		})
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatalf("jstest.StartCluster: server %s not ready for connections after 10s", o.ServerName)
		}
		addr := s.ClusterAddr()
		if addr == nil {
			t.Fatalf("jstest.StartCluster: server %s has no cluster listener", o.ServerName)
		}
		for _, l := range c.links {
			if l.to == i {
				l.setTarget(addr.String())
			}
		}
		c.Servers = append(c.Servers, s)
	}
	c.WaitForMetaLeader(t, ClusterReadyTimeout)
	return c
}

// Running returns the servers that have not been shut down.
func (c *Cluster) Running() []*server.Server {
	var out []*server.Server
	for _, s := range c.Servers {
		if s.Running() {
			out = append(out, s)
		}
	}
	return out
}

// Server returns the server called name, nil when there is none.
func (c *Cluster) Server(name string) *server.Server {
	for _, s := range c.Servers {
		if s.Name() == name {
			return s
		}
	}
	return nil
}

// ClientURLs is the client URL of every running server, comma separated, for
// nats.Connect to fail over between them.
func (c *Cluster) ClientURLs() string {
	var urls []string
	for _, s := range c.Running() {
		urls = append(urls, s.ClientURL())
	}
	return strings.Join(urls, ",")
}

// Conn connects to the running servers (in random order) with reconnects forever and
// closes the connection at cleanup.
func (c *Cluster) Conn(t testing.TB, opts ...nats.Option) *nats.Conn {
	t.Helper()
	base := []nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond)}
	nc, err := nats.Connect(c.ClientURLs(), append(base, opts...)...)
	if err != nil {
		t.Fatalf("connect to the cluster: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Crash takes s away the way a crash does: its routes are cut first, so nothing it says
// while shutting down (such as handing its leaderships over) reaches the others, who
// find out by missing heartbeats and elect new leaders; then it shuts down, dropping
// its clients.
func (c *Cluster) Crash(s *server.Server) {
	c.Partition(s)
	s.Shutdown()
	s.WaitForShutdown()
}

// Partition cuts s off the other servers, as a network partition does: it keeps
// running and serving its own clients from what it has, while the others go on
// without it. Nothing heals the partition.
func (c *Cluster) Partition(s *server.Server) {
	i := -1
	for k, srv := range c.Servers {
		if srv == s {
			i = k
		}
	}
	for _, l := range c.links {
		if l.from == i || l.to == i {
			l.cut()
		}
	}
}

// WaitForMetaLeader waits until every running server has a route to every other one,
// one of them is the JetStream meta leader and sees every running server as a current
// JetStream peer, and every running server's meta state is current. It fails the test
// with what it last saw after d.
func (c *Cluster) WaitForMetaLeader(t testing.TB, d time.Duration) *server.Server {
	t.Helper()
	running := c.Running()
	deadline := time.Now().Add(d)
	for {
		leader, why := metaLeader(running)
		if why == "" {
			return leader
		}
		if time.Now().After(deadline) {
			t.Fatalf("jstest: cluster of %d not ready after %s: %s", len(running), d, why)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// metaLeader returns the meta leader of a fully meshed cluster, or why there is none.
func metaLeader(running []*server.Server) (*server.Server, string) {
	for _, s := range running {
		rz, err := s.Routez(nil)
		if err != nil {
			return nil, fmt.Sprintf("routes of %s: %v", s.Name(), err)
		}
		var peers []string
		for _, r := range rz.Routes {
			if !slices.Contains(peers, r.RemoteName) {
				peers = append(peers, r.RemoteName)
			}
		}
		if len(peers) != len(running)-1 {
			return nil, fmt.Sprintf("%s has routes to %v", s.Name(), peers)
		}
	}
	var leader *server.Server
	for _, s := range running {
		if s.JetStreamIsLeader() {
			leader = s
		}
		if !s.JetStreamIsCurrent() {
			return nil, fmt.Sprintf("%s: JetStream meta state not current", s.Name())
		}
	}
	if leader == nil {
		return nil, "no JetStream meta leader"
	}
	if peers := leader.JetStreamClusterPeers(); len(peers) != len(running) {
		return nil, fmt.Sprintf("meta leader %s sees peers %v", leader.Name(), peers)
	}
	return leader, ""
}

// link relays the route connections server from opens to server to.
type link struct {
	from, to int
	ln       net.Listener
	ready    chan struct{} // closed once target is set
	target   string
	done     chan struct{} // closed when the link is cut

	mu     sync.Mutex
	conns  []net.Conn
	closed bool
	wg     sync.WaitGroup
}

func newLink(t testing.TB, from, to int) *link {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("jstest: route link: %v", err)
	}
	l := &link{from: from, to: to, ln: ln, ready: make(chan struct{}), done: make(chan struct{})}
	l.wg.Go(l.accept)
	t.Cleanup(func() {
		l.cut()
		l.wg.Wait()
	})
	return l
}

// setTarget sets the cluster address the link relays to, once its server runs.
func (l *link) setTarget(addr string) {
	l.target = addr
	close(l.ready)
}

func (l *link) accept() {
	for {
		in, err := l.ln.Accept()
		if err != nil {
			return // cut
		}
		if !l.track(in) {
			return
		}
		l.wg.Go(func() { l.relay(in) })
	}
}

// relay connects in to the target (waiting until it is known) and copies both ways
// until either side ends or the link is cut.
func (l *link) relay(in net.Conn) {
	defer l.untrack(in)
	select {
	case <-l.ready:
	case <-l.done:
		return
	}
	out, err := net.DialTimeout("tcp", l.target, 2*time.Second)
	if err != nil {
		return
	}
	if !l.track(out) {
		return
	}
	defer l.untrack(out)
	var copies sync.WaitGroup
	copies.Go(func() { _, _ = io.Copy(out, in); _ = out.Close(); _ = in.Close() })
	copies.Go(func() { _, _ = io.Copy(in, out); _ = in.Close(); _ = out.Close() })
	copies.Wait()
}

// track remembers a connection so cut can close it; false when the link is already cut
// (the connection is closed).
func (l *link) track(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		_ = c.Close()
		return false
	}
	l.conns = append(l.conns, c)
	return true
}

// untrack closes a connection and forgets it.
func (l *link) untrack(c net.Conn) {
	_ = c.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.conns = slices.DeleteFunc(l.conns, func(k net.Conn) bool { return k == c })
}

// cut closes the link and every connection it carries; new ones are refused.
func (l *link) cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.closed = true
	close(l.done)
	_ = l.ln.Close()
	for _, c := range l.conns {
		_ = c.Close()
	}
	l.conns = nil
}

// newSink listens on a free port and hangs up on whoever connects.
func newSink(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("jstest: route sink: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err == nil {
				_ = c.Close()
			}
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
	})
	return ln
}
