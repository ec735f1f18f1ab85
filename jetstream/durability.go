package jetstream

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// What a client can learn of how the servers flush JetStream's writes to disk
// (nats-server's sync_interval; docs/guarantees.md, "Durability below the process").
// The setting is the server's: no JetStream API tells an account's user. A process
// learns it from
//   - its embedded server, directly;
//   - the servers' monitoring endpoint (/varz, the jetstream config), when
//     COMPACTOR_NATS_MONITOR_URL names it;
//   - $SYS.REQ.SERVER.PING.VARZ, which every server answers to a user of the system
//     account (an ordinary account's user gets no responders);
//   - DurabilitySubject, which a compactor serve process answers for the embedded
//     server it runs (asked only when the request above met no responders: a server
//     without users, whose clients are all in one account).
// Otherwise it is unknown, and said so: never guessed.

// DurabilitySubject is where a compactor serve process with an embedded server answers
// that server's setting (AnswerDurability).
const DurabilitySubject = "compactor.server.durability"

// AnswerDurability answers requests on DurabilitySubject with d, the setting of the
// embedded server nc is connected to, until the subscription is drained or nc closes.
func AnswerDurability(nc *nats.Conn, d Durability) (*nats.Subscription, error) {
	answer, err := json.Marshal(d)
	if err != nil {
		return nil, err
	}
	return nc.Subscribe(DurabilitySubject, func(m *nats.Msg) { _ = m.Respond(answer) })
}

// ServerSync is one server's setting.
type ServerSync struct {
	Server string `json:"server"`
	// SyncAlways: every write is flushed before it is acknowledged.
	SyncAlways bool `json:"sync_always"`
	// Interval is how often writes are flushed otherwise, in nanoseconds in JSON
	// (absent with SyncAlways: the server's background interval then says nothing).
	Interval time.Duration `json:"sync_interval,omitempty"`
	// NoJetStream: the server runs without JetStream (it stores nothing).
	NoJetStream bool `json:"no_jetstream,omitempty"`
}

// Durability is what a process knows of its servers' flushing.
type Durability struct {
	// Source is where it was read: "embedded server", "monitoring <url>", "system
	// account".
	Source  string       `json:"source,omitempty"`
	Servers []ServerSync `json:"servers,omitempty"`
	// Unknown says why the setting could not be read ("" when it was).
	Unknown string `json:"unknown,omitempty"`
}

// Known reports whether the setting was read.
func (d Durability) Known() bool { return d.Unknown == "" && len(d.Servers) > 0 }

// SyncsEveryWrite reports whether every server with JetStream is known to flush every
// write before acknowledging it.
func (d Durability) SyncsEveryWrite() bool {
	if !d.Known() {
		return false
	}
	for _, s := range d.Servers {
		if !s.SyncAlways && !s.NoJetStream {
			return false
		}
	}
	return true
}

// String is the one line status, /readyz and the start-up log show.
func (d Durability) String() string {
	if !d.Known() {
		return "unknown: " + d.Unknown
	}
	var lazy []string
	for _, s := range d.Servers {
		if !s.SyncAlways && !s.NoJetStream {
			lazy = append(lazy, fmt.Sprintf("%s flushes every %s", s.Server, s.Interval))
		}
	}
	names := make([]string, 0, len(d.Servers))
	for _, s := range d.Servers {
		names = append(names, s.Server)
	}
	if len(lazy) == 0 {
		return fmt.Sprintf("syncs every write (%s; %s)", strings.Join(names, ", "), d.Source)
	}
	return fmt.Sprintf("%s: an OS crash or power loss loses what was acknowledged since "+
		"(set sync_interval: always in the server's jetstream block; %s)", strings.Join(lazy, "; "), d.Source)
}

// UnknownDurabilityHint is what to set so that a process can read the setting.
const UnknownDurabilityHint = "this user cannot read the server's settings (set COMPACTOR_NATS_MONITOR_URL " +
	"to the servers' monitoring URLs, e.g. http://nats-1:8222, or connect as a user of the system account)"

// UnknownWithUsersHint is why a JetStream user of a server that has users does not
// ask: Compactor's users need JetStream, which the system account never has, so the
// server would refuse the request (and log the refusal).
const UnknownWithUsersHint = "the server has users, and a user with JetStream cannot ask the system account " +
	"(set COMPACTOR_NATS_MONITOR_URL to the servers' monitoring URLs, e.g. http://nats-1:8222)"

// ReadDurabilityAsJetStreamUser is ReadDurability for a connection whose user needs
// JetStream (Compactor's roles and commands): on a server that has users such a user
// is never one of the system account's, so the system account is not asked (the
// server would refuse it and log a violation); the answer is unknown, saying why,
// unless monitorURLs are given.
func ReadDurabilityAsJetStreamUser(ctx context.Context, nc *nats.Conn, monitorURLs []string) Durability {
	if len(monitorURLs) == 0 && nc != nil && nc.AuthRequired() {
		return Durability{Source: "system account", Unknown: UnknownWithUsersHint}
	}
	return ReadDurability(ctx, nc, monitorURLs)
}

// durabilityWait bounds the system account's answers: the first within it, the
// others (one per server) until a quiet gap.
const (
	durabilityWait = 2 * time.Second
	durabilityGap  = 250 * time.Millisecond
)

// ValidateMonitorURL checks a server's monitoring URL: http or https, with a host.
func ValidateMonitorURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("monitoring URL %q: %w", raw, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("monitoring URL %q: want http://host:port (the server's http_port, e.g. http://nats-1:8222)", raw)
	}
	return nil
}

// ReadDurability reads the servers' setting: from monitorURLs (each server's
// monitoring endpoint) when given, else from the system account over nc. What cannot
// be read is Unknown, with the reason.
func ReadDurability(ctx context.Context, nc *nats.Conn, monitorURLs []string) Durability {
	if len(monitorURLs) > 0 {
		return readDurabilityHTTP(ctx, monitorURLs)
	}
	return readDurabilitySys(ctx, nc)
}

// varz is the part of a server's /varz (and of $SYS.REQ.SERVER.PING.VARZ's data) read
// here.
type varz struct {
	Name      string `json:"server_name"`
	ID        string `json:"server_id"`
	JetStream struct {
		Config *struct {
			SyncInterval time.Duration `json:"sync_interval"`
			SyncAlways   bool          `json:"sync_always"`
		} `json:"config"`
	} `json:"jetstream"`
}

func (v varz) sync() ServerSync {
	s := ServerSync{Server: v.Name}
	if s.Server == "" {
		s.Server = v.ID
	}
	if v.JetStream.Config == nil {
		s.NoJetStream = true
		return s
	}
	s.SyncAlways, s.Interval = v.JetStream.Config.SyncAlways, v.JetStream.Config.SyncInterval
	if s.SyncAlways {
		s.Interval = 0
	}
	return s
}

func readDurabilityHTTP(ctx context.Context, urls []string) Durability {
	d := Durability{Source: "monitoring " + strings.Join(urls, ", ")}
	client := &http.Client{Timeout: durabilityWait}
	for _, raw := range urls {
		if err := ValidateMonitorURL(raw); err != nil {
			d.Unknown = err.Error()
			return d
		}
		u := strings.TrimSuffix(raw, "/") + "/varz"
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			d.Unknown = fmt.Sprintf("%s: %v", u, err)
			return d
		}
		resp, err := client.Do(req)
		if err != nil {
			d.Unknown = fmt.Sprintf("%s: %v", u, err)
			return d
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
		resp.Body.Close()
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("HTTP %s", resp.Status)
		}
		var v varz
		if err == nil {
			err = json.Unmarshal(body, &v)
		}
		if err != nil {
			d.Unknown = fmt.Sprintf("%s: %v", u, err)
			return d
		}
		d.Servers = append(d.Servers, v.sync())
	}
	return d
}

func readDurabilitySys(ctx context.Context, nc *nats.Conn) Durability {
	d := Durability{Source: "system account"}
	inbox := nc.NewRespInbox()
	ch := make(chan *nats.Msg, 64)
	sub, err := nc.ChanSubscribe(inbox, ch)
	if err != nil {
		d.Unknown = fmt.Sprintf("%s: %v", UnknownDurabilityHint, err)
		return d
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest("$SYS.REQ.SERVER.PING.VARZ", inbox, nil); err != nil {
		d.Unknown = fmt.Sprintf("%s: %v", UnknownDurabilityHint, err)
		return d
	}
	seen := map[string]bool{}
	wait := time.NewTimer(durabilityWait)
	defer wait.Stop()
	for {
		select {
		case <-ctx.Done():
			d.Unknown = fmt.Sprintf("%s: %v", UnknownDurabilityHint, ctx.Err())
			return d
		case <-wait.C:
			if len(d.Servers) == 0 {
				d.Unknown = UnknownDurabilityHint + ": no server answered $SYS.REQ.SERVER.PING.VARZ"
			}
			// One line in the same order whichever server answered first.
			slices.SortFunc(d.Servers, func(a, b ServerSync) int { return strings.Compare(a.Server, b.Server) })
			return d
		case m := <-ch:
			if m.Header.Get("Status") == "503" {
				// No responders: the request stayed in this user's own account. A
				// compactor serve may run the server, and know.
				return askEmbedded(ctx, nc)
			}
			var r struct {
				Data  varz `json:"data"`
				Error *struct {
					Description string `json:"description"`
				} `json:"error"`
			}
			if err := json.Unmarshal(m.Data, &r); err != nil || r.Error != nil {
				why := "a malformed answer"
				if r.Error != nil {
					why = r.Error.Description
				}
				d.Unknown = fmt.Sprintf("%s: %s", UnknownDurabilityHint, why)
				return d
			}
			s := r.Data.sync()
			if !seen[s.Server] {
				seen[s.Server] = true
				d.Servers = append(d.Servers, s)
			}
			wait.Reset(durabilityGap)
		}
	}
}

// EmbeddedDurability is the setting of a process's own embedded server.
func EmbeddedDurability(server string, syncAlways bool, interval time.Duration) Durability {
	if syncAlways {
		interval = 0
	}
	return Durability{Source: "embedded server", Servers: []ServerSync{{Server: server, SyncAlways: syncAlways, Interval: interval}}}
}

// askEmbedded asks a compactor serve process for its embedded server's setting; no
// answer is unknown.
func askEmbedded(ctx context.Context, nc *nats.Conn) Durability {
	rctx, cancel := context.WithTimeout(ctx, durabilityWait)
	defer cancel()
	m, err := nc.RequestWithContext(rctx, DurabilitySubject, nil)
	if err != nil {
		return Durability{Unknown: UnknownDurabilityHint}
	}
	var d Durability
	if err := json.Unmarshal(m.Data, &d); err != nil || !d.Known() {
		return Durability{Unknown: UnknownDurabilityHint + ": a malformed answer on " + DurabilitySubject}
	}
	d.Source += ", as the compactor serve running it says"
	return d
}
