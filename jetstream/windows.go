package jetstream

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
)

// LearnedWindowTTL is how long the windows bucket keeps what was learned of an endpoint:
// after it, the next request is sized by the configured window again, and an endpoint
// whose window grew is heard at its new size (one refusal per endpoint and model per
// TTL when it did not grow).
const LearnedWindowTTL = 6 * time.Hour

// LearnedWindow is what the workers learned of a summarizer endpoint's context window
// from its refusals for length, shared by every worker of the deployment.
type LearnedWindow struct {
	// Endpoint is the base URL, without credentials, query or fragment; Model the model.
	Endpoint string `json:"endpoint"`
	Model    string `json:"model"`
	// Tokens is the window requests are sized by, as Compactor counts tokens (chars/4).
	Tokens int `json:"tokens"`
	// StatedTokens is the window the endpoint named in its refusal, in its model's
	// tokens (0 when it named none).
	StatedTokens int `json:"stated_tokens,omitempty"`
	// RefusedTokens is the size of the request it refused, as Compactor counts.
	RefusedTokens int       `json:"refused_tokens"`
	LearnedAt     time.Time `json:"learned_at"`
}

// Windows is the handle on the windows bucket: the learned context window of each
// summarizer endpoint and model. Store.Windows returns it. The bucket is provisioned
// like the others; a deployment whose provisioning predates it, or a user without its
// rights, gets the errors of a missing bucket, which callers treat as nothing learned.
type Windows struct {
	*core

	mu sync.Mutex
	// quietUntil: a read or write that failed (a bucket that is not there, a user
	// without its rights, whose requests go unanswered) is not tried again before it.
	quietUntil time.Time
	lastErr    error
}

// windowsTimeout bounds one read or write of the windows bucket, and windowsQuiet is how
// long the handle answers ErrWindowsUnavailable after one failed: learning a window is
// an optimisation, and a job or a status never waits long for it.
const (
	windowsTimeout = 2 * time.Second
	windowsQuiet   = time.Minute
)

// ErrWindowsUnavailable is matched by the errors of a Windows handle while it rests
// after a failed read or write.
var ErrWindowsUnavailable = errors.New("the windows bucket did not answer lately")

// Windows returns the handle on the windows bucket.
func (s *Store) Windows() *Windows { return &s.windows }

// guard runs op within windowsTimeout, unless the handle is resting after a failure;
// a failure starts a rest.
func (w *Windows) guard(ctx context.Context, op func(ctx context.Context) error) error {
	w.mu.Lock()
	if time.Now().Before(w.quietUntil) {
		err := w.lastErr
		w.mu.Unlock()
		return fmt.Errorf("%w: %w", ErrWindowsUnavailable, err)
	}
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, windowsTimeout)
	defer cancel()
	err := op(ctx)
	if err != nil {
		w.mu.Lock()
		w.quietUntil, w.lastErr = time.Now().Add(windowsQuiet), err
		w.mu.Unlock()
	}
	return err
}

// WindowKey is the key of an endpoint and model in the windows bucket: the first 32 hex
// digits of the SHA-256 of both, so no URL character has to fit a key.
func WindowKey(endpoint, model string) string {
	sum := sha256.Sum256([]byte(endpoint + "\n" + model))
	return hex.EncodeToString(sum[:16])
}

func (w *Windows) subject(key string) string { return "$KV." + w.cfg.WindowsBucket + "." + key }

func (w *Windows) stream() string { return "KV_" + w.cfg.WindowsBucket }

// Get returns what was learned of endpoint and model, nil when nothing was (or it
// expired).
func (w *Windows) Get(ctx context.Context, endpoint, model string) (*LearnedWindow, error) {
	subj := w.subject(WindowKey(endpoint, model))
	var msgs []StoredMsg
	err := w.guard(ctx, func(ctx context.Context) (err error) {
		msgs, _, err = w.directRequest(ctx, w.stream(), map[string]any{"multi_last": []string{subj}, "batch": 1}, subj)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("learned window of %s %s: %w", endpoint, model, err)
	}
	for _, m := range msgs {
		if lw, ok := decodeWindow(m); ok && lw.Endpoint == endpoint && lw.Model == model {
			return lw, nil
		}
	}
	return nil, nil
}

// Learn records lw, unless a window as small or smaller was learned of its endpoint and
// model meanwhile (another worker's). It returns the window now on record.
func (w *Windows) Learn(ctx context.Context, lw LearnedWindow) (LearnedWindow, error) {
	if lw.Endpoint == "" || lw.Tokens <= 0 {
		return lw, errors.New("a learned window needs an endpoint and a positive size")
	}
	if have, err := w.Get(ctx, lw.Endpoint, lw.Model); err == nil && have != nil && have.Tokens <= lw.Tokens {
		return *have, nil
	}
	if lw.LearnedAt.IsZero() {
		lw.LearnedAt = time.Now().UTC()
	}
	data, err := json.Marshal(lw)
	if err != nil {
		return lw, err
	}
	err = w.guard(ctx, func(ctx context.Context) error {
		_, err := w.js.Publish(ctx, w.subject(WindowKey(lw.Endpoint, lw.Model)), data, natsjs.WithExpectStream(w.stream()))
		return err
	})
	if err != nil {
		return lw, fmt.Errorf("record the learned window of %s %s: %w", lw.Endpoint, lw.Model, err)
	}
	return lw, nil
}

// List returns every window on record, by endpoint and model.
func (w *Windows) List(ctx context.Context) ([]LearnedWindow, error) {
	subj := w.subject("*")
	var msgs []StoredMsg
	err := w.guard(ctx, func(ctx context.Context) (err error) {
		msgs, _, err = w.directRequest(ctx, w.stream(), map[string]any{"multi_last": []string{subj}, "batch": MaxCoalesced}, subj)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("learned windows: %w", err)
	}
	var out []LearnedWindow
	for _, m := range msgs {
		if lw, ok := decodeWindow(m); ok {
			out = append(out, *lw)
		}
	}
	slices.SortFunc(out, func(a, b LearnedWindow) int {
		return strings.Compare(a.Endpoint+"\n"+a.Model, b.Endpoint+"\n"+b.Model)
	})
	return out, nil
}

// decodeWindow reads one value of the bucket; a delete or purge marker, or a value that
// does not decode, is none.
func decodeWindow(m StoredMsg) (*LearnedWindow, bool) {
	if op := m.Header.Get("KV-Operation"); op != "" || len(m.Data) == 0 {
		return nil, false
	}
	var lw LearnedWindow
	if err := json.Unmarshal(m.Data, &lw); err != nil || lw.Tokens <= 0 {
		return nil, false
	}
	return &lw, true
}
