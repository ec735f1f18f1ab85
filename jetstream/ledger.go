package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/schemas"
)

// Ledger is the handle on the savings ledger (Config.LedgerStream): the proxy appends
// an entry per phase of each exchange, compactor savings reads them back. Store.Ledger
// returns it.
type Ledger struct{ *core }

// Ledger returns the handle on the savings ledger.
func (s *Store) Ledger() *Ledger { return &Ledger{&s.core} }

// ErrNoLedger is matched by the error of an append when the deployment has no ledger
// stream (an earlier version's, not provisioned since, or Config.LedgerStream empty).
var ErrNoLedger = errors.New("no savings ledger stream")

// Enabled reports whether the config names a ledger stream.
func (l *Ledger) Enabled() bool { return l.cfg.LedgerStream != "" }

// Append stores e on its conversation's ledger subject with its message id (an append
// made twice within the duplicate window is stored once). e is validated first.
func (l *Ledger) Append(ctx context.Context, e *schemas.LedgerEntry) error {
	if !l.Enabled() {
		return ErrNoLedger
	}
	if err := e.Validate(); err != nil {
		return err
	}
	subj, err := l.cfg.LedgerSubject(e.Conversation)
	if err != nil {
		return err
	}
	data, err := json.Marshal(e)
	if err != nil {
		return err
	}
	if len(data) > schemas.MaxLedgerEntryBytes {
		return fmt.Errorf("ledger entry of %d bytes, over %d", len(data), schemas.MaxLedgerEntryBytes)
	}
	_, err = l.js.Publish(ctx, subj, data, natsjs.WithMsgID(e.MsgID()), natsjs.WithExpectStream(l.cfg.LedgerStream))
	switch {
	case err == nil:
		return nil
	case errors.Is(err, natsjs.ErrNoStreamResponse) || errors.Is(err, natsjs.ErrStreamNotFound):
		return fmt.Errorf("append to %s: %w (%w)", l.cfg.LedgerStream, ErrNoLedger, err)
	}
	return fmt.Errorf("append to %s: %w", l.cfg.LedgerStream, err)
}

// LedgerRead bounds a read of the ledger.
type LedgerRead struct {
	// Conversation, when set, reads that conversation's entries only.
	Conversation string
	// Since and Until bound the entries' stream times (zero: unbounded); entries are
	// read from Since, and the read stops at the stream's last entry when it began.
	Since, Until time.Time
	// Limit bounds the entries read, invalid ones included (0: MaxLedgerRead).
	Limit int
}

// MaxLedgerRead bounds one read of the ledger: with about 400 bytes an entry, 4
// million entries are under 2 GB read, and a year of a busy deployment's exchanges.
const MaxLedgerRead = 4 << 20

// LedgerStats is what a read of the ledger found besides its entries.
type LedgerStats struct {
	// Read is the entries read; Invalid those left out (they did not decode, failed
	// validation or named another conversation than their subject's).
	Read, Invalid int
	// More says the read stopped at its limit with entries left.
	More bool
}

// Read calls fn with every valid entry r bounds, oldest first. An entry is valid when
// it decodes, validates, and names the conversation of its subject: a writer may not
// book its exchanges to another conversation. A missing ledger stream reads as empty.
func (l *Ledger) Read(ctx context.Context, r LedgerRead, fn func(*schemas.LedgerEntry) error) (LedgerStats, error) {
	var st LedgerStats
	if !l.Enabled() {
		return st, nil
	}
	limit := r.Limit
	if limit <= 0 || limit > MaxLedgerRead {
		limit = MaxLedgerRead
	}
	filter := l.cfg.LedgerPrefix + ".*"
	if r.Conversation != "" {
		var err error
		if filter, err = l.cfg.LedgerSubject(r.Conversation); err != nil {
			return st, err
		}
	}
	str, err := l.js.Stream(ctx, l.cfg.LedgerStream)
	if errors.Is(err, natsjs.ErrStreamNotFound) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("read %s: %w", l.cfg.LedgerStream, err)
	}
	last := str.CachedInfo().State.LastSeq
	if last == 0 {
		return st, nil
	}
	cfg := natsjs.OrderedConsumerConfig{FilterSubjects: []string{filter}, DeliverPolicy: natsjs.DeliverAllPolicy,
		InactiveThreshold: 10 * time.Second}
	if !r.Since.IsZero() {
		since := r.Since
		cfg.DeliverPolicy, cfg.OptStartTime = natsjs.DeliverByStartTimePolicy, &since
	}
	oc, err := l.js.OrderedConsumer(ctx, l.cfg.LedgerStream, cfg)
	if err != nil {
		return st, fmt.Errorf("read %s: %w", l.cfg.LedgerStream, err)
	}
	for {
		batch, err := oc.FetchNoWait(256)
		if err != nil {
			return st, fmt.Errorf("read %s: %w", l.cfg.LedgerStream, err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				return st, fmt.Errorf("read %s: %w", l.cfg.LedgerStream, err)
			}
			if md.Sequence.Stream > last || (!r.Until.IsZero() && md.Timestamp.After(r.Until)) {
				return st, nil
			}
			if st.Read == limit {
				st.More = true
				return st, nil
			}
			st.Read++
			e, err := schemas.DecodeLedgerEntry(m.Data())
			if err != nil {
				st.Invalid++
				continue
			}
			if subj, _ := l.cfg.LedgerSubject(e.Conversation); subj != m.Subject() {
				st.Invalid++
				continue
			}
			if err := fn(e); err != nil {
				return st, err
			}
		}
		if err := batch.Error(); err != nil {
			return st, fmt.Errorf("read %s: %w", l.cfg.LedgerStream, err)
		}
		if n == 0 {
			return st, nil
		}
	}
}

// forgetLedger purges conv's ledger entries and, for a conversation that is no
// branch, those of its branches (BranchOf) the ledger holds: a branch the proxy booked
// an exchange on may have no message in CHAT (its turn refused, its messages aged out),
// so the walk of CHAT's subjects does not find it. The purge is tried even when this
// process found the stream missing at its start: an admin may have provisioned it
// since. A deployment without the stream holds none.
func (s *Store) forgetLedger(ctx context.Context, conv string) (uint64, error) {
	if s.cfg.LedgerStream == "" {
		return 0, nil
	}
	subjects := []string{}
	subj, err := s.cfg.LedgerSubject(conv)
	if err != nil {
		return 0, err
	}
	subjects = append(subjects, subj)
	if !IsBranch(conv) {
		branches, err := s.ledgerBranches(ctx, conv)
		if err != nil {
			return 0, err
		}
		subjects = append(subjects, branches...)
	}
	var total uint64
	for _, subj := range subjects {
		n, err := s.purge(ctx, s.cfg.LedgerStream, subj, 0)
		var ae *apiError
		if errors.As(err, &ae) && ae.ErrCode == int(natsjs.JSErrCodeStreamNotFound) {
			return 0, nil
		}
		if err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}

// ledgerBranches are the ledger subjects of conv's branches, from one stream info that
// lists the ledger's subjects; none when the stream is missing.
func (s *Store) ledgerBranches(ctx context.Context, conv string) ([]string, error) {
	str, err := s.js.Stream(ctx, s.cfg.LedgerStream)
	if errors.Is(err, natsjs.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", s.cfg.LedgerStream, err)
	}
	info, err := str.Info(ctx, natsjs.WithSubjectFilter(s.cfg.LedgerPrefix+".*"))
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", s.cfg.LedgerStream, err)
	}
	var out []string
	for subj := range info.State.Subjects {
		if c, ok := strings.CutPrefix(subj, s.cfg.LedgerPrefix+"."); ok && BranchOf(c, conv) {
			out = append(out, subj)
		}
	}
	slices.Sort(out)
	return out, nil
}
