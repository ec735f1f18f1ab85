package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/schemas"
)

// Forgetting a conversation deletes it from every stream, bucket and object store, and
// leaves a tombstone so that work in flight cannot bring it back.
//
// The order, and why no interleaving resurrects anything:
//
//  1. Forget reads CHAT's last sequence T. The conversation's messages up to T are the
//     forgotten conversation; a message published to the same id later gets a sequence
//     above T and starts a new conversation.
//  2. It writes the tombstone {through_seq: T} under schemas.ForgetKey(conv) in the
//     forget bucket, then publishes a forgotten event for live subscribers.
//  3. Only then it deletes: the pending request, the idle timer, the CHAT messages up
//     to T (each erased: overwritten in the store), every revision of the KV value and
//     of the policy, the stored objects, the dead letters and the events.
//
// Every other writer of the conversation (a worker job, the trigger's requests, the
// service's manual requests) writes first and checks after, reading the tombstone
// from the bucket's stream leader (Forgotten), then takes back what it wrote
// (TakeBack) when the tombstone covers it: a value whose FirstSeq is ≤ T, or work
// asked for with up_to_seq ≤ T. For one such write W followed by its check C:
//
//   - W before the purges of step 3: the purges delete it (they delete everything of
//     the conversation, not only what was there at step 1).
//   - W after them: then C comes after step 2 as well, sees the tombstone and takes W
//     back. Since C follows W, there is no third case: no check-then-write race.
//
// A KV value adds one more way back: another job may build on a forgotten value V
// before V's writer took it back. It inherits V's FirstSeq (≤ T), so its own check
// covers it too. A write with compare-and-set on a revision the purge deleted fails.
// And a job that starts after step 2 finds the tombstone first: it drops a request made
// before the forget, does not build on a forgotten value (and removes one it finds) and
// reads CHAT only above T, so the new conversation is compacted from scratch.
//
// What this does not cover: a process that dies between a write and its check, while
// the conversation is being forgotten, leaves that write. A value so left is never
// served (every reader drops a value the tombstone covers: Results.Live) and is removed
// by the trigger, the next job of the same id, or SweepForgotten before the tombstone
// expires; a request is dropped by the worker that gets it; an event or a dead letter
// stays until its stream's max age (forget again to remove it).
//
// Objects are found through the stubs of the conversation's messages (objectRefs), so a
// forget takes time in proportion to the conversation, and are ordered against the
// tombstone: one stored after it, or named by a message published after the forget
// began, is the new conversation's and stays.

// ForgetStepError is the error of one step of a forget; the tombstone is written and
// the other steps still ran. Forgetting again is safe and finishes what it can.
type ForgetStepError struct {
	Step string
	Err  error
}

func (e *ForgetStepError) Error() string {
	return fmt.Sprintf("forget: %s: %v (forget again to finish)", e.Step, e.Err)
}

func (e *ForgetStepError) Unwrap() error { return e.Err }

// Forget deletes a conversation everywhere, for good: its CHAT messages, every revision
// of its KV value and policy, its pending request, idle timer, dead letters and events,
// and its objects (those its messages' stubs name in the objects bucket, when that bucket
// exists, stored before the tombstone). A conversation with nothing stored is not an error: every count is 0. See
// the comment above for the order and why work in flight does not bring it back.
func (s *Store) Forget(ctx context.Context, conv string) (schemas.ForgetResponse, error) {
	out := schemas.ForgetResponse{Conversation: conv}
	if err := schemas.ValidateConversationID(conv); err != nil {
		return out, err
	}
	chat, err := s.js.Stream(ctx, s.cfg.ChatStream)
	if err != nil {
		return out, &ForgetStepError{Step: "read the last sequence of " + s.cfg.ChatStream, Err: err}
	}
	out.ThroughSeq = chat.CachedInfo().State.LastSeq
	out.ForgottenAt = time.Now().UTC()

	tomb, _ := json.Marshal(schemas.Tombstone{ThroughSeq: out.ThroughSeq, ForgottenAt: out.ForgottenAt})
	ack, err := s.js.Publish(ctx, "$KV."+s.cfg.ForgetBucket+"."+schemas.ForgetKey(conv), tomb,
		natsjs.WithExpectStream("KV_"+s.cfg.ForgetBucket))
	if err != nil {
		return out, &ForgetStepError{Step: "write the tombstone", Err: err}
	}
	// The objects the forgotten conversation's messages refer to, read before the
	// messages are deleted, and when the server stored the tombstone, to tell objects
	// stored before it from those after.
	var stepErrs []error
	objects, tombAt, err := s.objectsToForget(ctx, conv, out.ThroughSeq, ack.Sequence)
	if err != nil {
		stepErrs = append(stepErrs, &ForgetStepError{Step: "find the objects", Err: err})
	}
	// For live subscribers (the trigger drops its state, a waiting compact request
	// answers): best effort, as every writer checks the tombstone anyway. The purge of
	// the events below removes it.
	notified := s.events.Publish(ctx, schemas.Event{Type: schemas.EventForgotten, Conversation: conv,
		RequestID: schemas.NewRequestID(), At: out.ForgottenAt}) == nil

	stepErrs = append(stepErrs, s.forgetSteps(ctx, conv, &out, objects, tombAt, notified)...)
	if !IsBranch(conv) {
		if err := s.forgetBranches(ctx, conv, &out); err != nil {
			stepErrs = append(stepErrs, &ForgetStepError{Step: "forget the branches", Err: err})
		}
	}
	return out, errors.Join(stepErrs...)
}

// BranchSep separates a conversation's id from the name of one of its branches
// (<conversation>--<digest>): the conversations the proxy stores a client's edited
// history in. Forgetting a conversation forgets its branches.
const BranchSep = "--"

// BranchDigits is how many lowercase hex digits follow BranchSep in a branch's id.
const BranchDigits = 16

// BranchOf reports whether conv is a branch of parent: parent, BranchSep and exactly
// BranchDigits lowercase hex digits. A conversation that merely starts with parent and
// "--" (proj--billing of proj) is not.
func BranchOf(conv, parent string) bool {
	rest, ok := strings.CutPrefix(conv, parent+BranchSep)
	return ok && len(rest) == BranchDigits && IsBranch(conv)
}

// IsBranch reports whether conv ends like a branch's id: BranchSep and BranchDigits
// lowercase hex digits.
func IsBranch(conv string) bool {
	i := len(conv) - BranchDigits - len(BranchSep)
	if i < 1 || conv[i:i+len(BranchSep)] != BranchSep {
		return false
	}
	for _, c := range conv[i+len(BranchSep):] {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// forgetBranches forgets every branch of conv (BranchOf), adding what each
// deleted to out. It walks CHAT's subjects: a branch is found wherever it is stored.
func (s *Store) forgetBranches(ctx context.Context, conv string, out *schemas.ForgetResponse) error {
	var branches []string
	err := s.chat.eachConversation(ctx, func(c string) {
		if BranchOf(c, conv) && !slices.Contains(branches, c) {
			branches = append(branches, c)
		}
	})
	if err != nil {
		return err
	}
	var errs []error
	for _, b := range branches {
		r, err := s.Forget(ctx, b)
		if err != nil {
			errs = append(errs, fmt.Errorf("branch %s: %w", b, err))
		}
		out.Deleted.Add(r.Deleted)
	}
	return errors.Join(errs...)
}

// forgetStep is one deletion of a forget.
type forgetStep struct {
	name     string
	stream   string
	subject  string
	before   uint64 // 0: every message of the subject
	counted  *uint64
	erase    bool // each message is erased before the purge
	objects  bool // the objects bucket, not one subject
	notify   bool // the policy: its watchers (the caches of every process) hear of the purge
	eventsOf bool
	ledger   bool // the savings ledger, which a deployment may lack
}

// forgetSteps runs the deletions of a forget whose tombstone is written, counting what
// each deleted in out, and returns the errors of those that failed: a step that fails
// does not keep the others from running.
func (s *Store) forgetSteps(ctx context.Context, conv string, out *schemas.ForgetResponse, objects map[string]bool, tombAt time.Time, notified bool) []error {
	subj := func(b func(string) (string, error)) string { v, _ := b(conv); return v }
	d := &out.Deleted
	steps := []forgetStep{
		// Work first, so no new job starts on a pending request and no idle timer fires.
		{name: "pending request", stream: s.cfg.RequestsStream, subject: subj(s.cfg.RequestSubject), counted: &d.Requests},
		{name: "idle timer", stream: s.cfg.ActivityStream, subject: subj(s.cfg.ActivitySubject), counted: &d.ActivityMarkers},
		// ... and where a partitioned layout stores it (activity.<conv>.<N>.<p>).
		{name: "idle timer", stream: s.cfg.ActivityStream, subject: subj(s.cfg.activityFilter), counted: &d.ActivityMarkers},
		{name: "messages", stream: s.cfg.ChatStream, subject: subj(s.cfg.ChatFilter), before: out.ThroughSeq + 1, counted: &d.ChatMessages, erase: true},
		{name: "value", stream: "KV_" + s.cfg.ResultsBucket, subject: "$KV." + s.cfg.ResultsBucket + "." + conv, counted: &d.ResultRevisions},
		{name: "policy", stream: "KV_" + s.cfg.PolicyBucket, subject: "$KV." + s.cfg.PolicyBucket + "." + conv, counted: &d.PolicyRevisions, notify: true},
		{name: "objects", objects: true, counted: &d.Objects},
		// Last: jobs in flight may still report until they see the tombstone.
		{name: "dead letters", stream: s.cfg.DeadStream, subject: subj(s.cfg.DeadSubject), counted: &d.DeadLetters},
		{name: "events", stream: s.cfg.EventsStream, subject: subj(s.cfg.EventSubject), counted: &d.Events, eventsOf: true},
		// After the events: an exchange of the proxy's finishing meanwhile may still book
		// its reply (a savings reader drops a reply whose request entry is gone).
		{name: "ledger entries", ledger: true, counted: &d.LedgerEntries},
	}
	var errs []error
	for _, st := range steps {
		if forgetStepHook != nil {
			forgetStepHook(st.name)
		}
		n, err := s.forgetStep(ctx, conv, out, st, objects, tombAt)
		if err != nil {
			// The other places are still deleted: a step that fails (a hostile object
			// description, a timeout) must not keep the rest of the conversation.
			errs = append(errs, &ForgetStepError{Step: "delete the " + st.name, Err: err})
		}
		if st.eventsOf && notified && n > 0 {
			n-- // the forgotten event of this forget is not the conversation's
		}
		*st.counted += n
	}
	return errs
}

// forgetStep runs one deletion and returns how many messages it deleted.
func (s *Store) forgetStep(ctx context.Context, conv string, out *schemas.ForgetResponse, st forgetStep, objects map[string]bool, tombAt time.Time) (uint64, error) {
	switch {
	case st.ledger:
		return s.forgetLedger(ctx, conv)
	case st.objects:
		// Those a message of the new conversation refers to (published since the forget
		// began, the same content again) stay: read now, as late as can be.
		keep, err := s.objectRefs(ctx, conv, out.ThroughSeq+1, 0)
		if err != nil {
			return 0, err
		}
		return s.forgetObjects(ctx, objects, keep, tombAt)
	case st.erase:
		// Raw history is most of a conversation's bytes: each message is overwritten in
		// the store, not only unlinked; the purge then takes what the erase missed.
		erased, err := s.eraseChat(ctx, conv, out.ThroughSeq, time.Now().Add(EraseBudget))
		out.Deleted.ChatMessagesErased = erased
		if err != nil {
			return erased, err
		}
		n, err := s.purge(ctx, st.stream, st.subject, st.before)
		return n + erased, err
	case st.notify:
		n, err := s.purge(ctx, st.stream, st.subject, st.before)
		if err != nil {
			return n, err
		}
		return n, s.policies.Notify(ctx, conv)
	default:
		return s.purge(ctx, st.stream, st.subject, st.before)
	}
}

// Forgotten returns the tombstone of a forgotten conversation, nil when it was not
// forgotten within the forget bucket's TTL. It reads from the bucket's stream leader,
// so a check made after a write sees every tombstone written before it.
func (s *Store) Forgotten(ctx context.Context, conv string) (*schemas.Tombstone, error) {
	return s.forgotten(ctx, conv)
}

// forgotten is Forgotten, for every handle.
func (s *core) forgotten(ctx context.Context, conv string) (*schemas.Tombstone, error) {
	if err := schemas.ValidateConversationID(conv); err != nil {
		return nil, err
	}
	// A missing bucket is an error: it must not read as "not forgotten".
	m, err := s.leaderGetOf(ctx, "KV_"+s.cfg.ForgetBucket, map[string]any{
		"last_by_subj": "$KV." + s.cfg.ForgetBucket + "." + schemas.ForgetKey(conv),
	}, true)
	if errors.Is(err, errNoMessage) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the tombstone of %s: %w", conv, err)
	}
	if op := m.Header.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
		return nil, nil
	}
	var t schemas.Tombstone
	if err := json.Unmarshal(m.Data, &t); err != nil {
		return nil, fmt.Errorf("the tombstone of %s does not decode: %w", conv, err)
	}
	return &t, nil
}

// Writes is what one job, or one request of the trigger or the service, stored for a
// conversation: events, dead letters, requests and revisions of the value. When the
// conversation turns out to have been forgotten meanwhile, TakeBack deletes them. Safe
// for concurrent use; a nil *Writes records nothing.
type Writes struct {
	mu      sync.Mutex
	events  []uint64
	dead    []uint64
	reqs    []uint64
	results []uint64
}

// add records seq in the list pick chooses.
func (w *Writes) add(pick func(*Writes) *[]uint64, seq uint64) {
	if w == nil || seq == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	l := pick(w)
	*l = append(*l, seq)
}

// Request records a request Enqueue stored at seq.
func (w *Writes) Request(seq uint64) { w.add(func(w *Writes) *[]uint64 { return &w.reqs }, seq) }

// Result records a revision of the value Results.Put wrote.
func (w *Writes) Result(rev uint64) { w.add(func(w *Writes) *[]uint64 { return &w.results }, rev) }

// Empty reports whether nothing was recorded.
func (w *Writes) Empty() bool {
	if w == nil {
		return true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.events)+len(w.dead)+len(w.reqs)+len(w.results) == 0
}

// TakeBack deletes what w recorded for conv: the value's revisions up to the newest one
// recorded, and each event, dead letter and request (a request a worker holds is then
// simply gone; its job finds the tombstone). What is already gone (the forget deleted
// it) is no error. Messages are erased, not only unlinked.
func (s *Store) TakeBack(ctx context.Context, conv string, w *Writes) error {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	results, reqs, dead, events := append([]uint64(nil), w.results...), append([]uint64(nil), w.reqs...),
		append([]uint64(nil), w.dead...), append([]uint64(nil), w.events...)
	w.mu.Unlock()
	var errs []error
	if len(results) > 0 {
		errs = append(errs, s.results.Remove(ctx, conv, slices.Max(results)))
	}
	for _, l := range []struct {
		stream string
		seqs   []uint64
	}{{s.cfg.RequestsStream, reqs}, {s.cfg.DeadStream, dead}, {s.cfg.EventsStream, events}} {
		for _, seq := range l.seqs {
			errs = append(errs, s.eraseMsg(ctx, l.stream, seq))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("take back what was written for %s: %w", conv, err)
	}
	return nil
}

// apiError is the error of a JetStream API answer.
type apiError struct {
	Code        int    `json:"code"`
	ErrCode     int    `json:"err_code"`
	Description string `json:"description"`
}

func (e *apiError) Error() string { return fmt.Sprintf("%s (code %d)", e.Description, e.ErrCode) }

// apiRequest sends a JetStream API request and decodes its answer into out; an error
// answer is returned as an *apiError.
func (s *core) apiRequest(ctx context.Context, subject string, req, out any) error {
	body, _ := json.Marshal(req)
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	resp, err := s.nc.RequestWithContext(ctx, subject, body)
	if err != nil {
		return err
	}
	var r struct {
		Error *apiError `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return fmt.Errorf("undecodable answer: %w", err)
	}
	if r.Error != nil {
		return r.Error
	}
	return json.Unmarshal(resp.Data, out)
}

// purge deletes the messages of one subject of a stream (those with a sequence below
// before, when before > 0) and returns how many it deleted. The purge request names
// the subject in its body: the stream's purge permission cannot be limited to one
// conversation, which is why only the service (and a worker, on the results bucket)
// may purge.
func (s *core) purge(ctx context.Context, stream, subject string, before uint64) (uint64, error) {
	req := map[string]any{"filter": subject}
	if before > 0 {
		req["seq"] = before
	}
	var out struct {
		Purged uint64 `json:"purged"`
	}
	if err := s.apiRequest(ctx, apiPrefix+"STREAM.PURGE."+stream, req, &out); err != nil {
		return 0, fmt.Errorf("purge %s of %s: %w", subject, stream, err)
	}
	return out.Purged, nil
}

// The server's answers to a delete of a sequence that holds no message (any more):
// JSNoMessageFoundErr and JSSequenceNotFoundErrF.
const (
	errCodeNoMessageFound   = 10057
	errCodeSequenceNotFound = 10043
)

// eraseMsg deletes one message and overwrites its bytes in the store; a message
// already gone is no error.
func (s *core) eraseMsg(ctx context.Context, stream string, seq uint64) error {
	var out struct{}
	err := s.apiRequest(ctx, apiPrefix+"STREAM.MSG.DELETE."+stream, map[string]any{"seq": seq}, &out)
	var ae *apiError
	if errors.As(err, &ae) && (ae.ErrCode == int(natsjs.JSErrCodeMessageNotFound) || ae.ErrCode == errCodeNoMessageFound ||
		ae.ErrCode == errCodeSequenceNotFound || ae.Code == 404) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete message %d of %s: %w", seq, stream, err)
	}
	return nil
}

// EraseBudget bounds how long a forget erases raw history message by message (about a
// millisecond each on one server); what is left then is purged: deleted, but its bytes
// stay in the server's files until it compacts them.
const EraseBudget = 20 * time.Second

// eraseChat erases (overwrites, then deletes) the messages of conv up to through,
// found with batched direct gets of its literal subjects, until the deadline, and
// returns how many it erased.
func (s *core) eraseChat(ctx context.Context, conv string, through uint64, deadline time.Time) (uint64, error) {
	var n uint64
	var ferr error
	err := s.eachPage(ctx, conv, 1, through, func(page []StoredMsg) bool {
		for _, m := range page {
			if time.Now().After(deadline) {
				return false
			}
			if ferr = s.eraseMsg(ctx, s.cfg.ChatStream, m.Seq); ferr != nil {
				return false
			}
			n++
		}
		return true
	})
	return n, errors.Join(err, ferr)
}

// forgetStepHook, when set (by a test), is called before each deletion step of a
// forget with the step's name.
var forgetStepHook func(step string)

// objectsToForget reads what the objects step of a forget needs: the objects the
// messages of conv up to through refer to, and when the server stored the tombstone
// (at sequence tombSeq of the forget bucket).
func (s *core) objectsToForget(ctx context.Context, conv string, through, tombSeq uint64) (forget map[string]bool, at time.Time, err error) {
	m, err := s.leaderGetOf(ctx, "KV_"+s.cfg.ForgetBucket, map[string]any{"seq": tombSeq}, true)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("read the tombstone back: %w", err)
	}
	if forget, err = s.objectRefs(ctx, conv, 1, through); err != nil {
		return nil, m.Time, err
	}
	return forget, m.Time, nil
}

// objectRefs returns the names of the objects of conv that the conversation's stubs
// with a sequence in [from, through] refer to (through 0: to the end), read with
// batched direct gets of its literal subjects: in time proportional to the
// conversation, not to the bucket.
func (s *core) objectRefs(ctx context.Context, conv string, from, through uint64) (map[string]bool, error) {
	if _, err := s.cfg.ChatFilter(conv); err != nil {
		return nil, err
	}
	refs := map[string]bool{}
	err := s.eachPage(ctx, conv, from, through, func(page []StoredMsg) bool {
		for _, m := range page {
			// Read leniently: any name in the conversation's prefix is looked up.
			var stub struct {
				Ref *struct{ Bucket, Name string } `json:"content_ref"`
			}
			if json.Unmarshal(m.Data, &stub) == nil && stub.Ref != nil && stub.Ref.Bucket == s.cfg.ObjectsBucket &&
				strings.HasPrefix(stub.Ref.Name, conv+"/") {
				refs[stub.Ref.Name] = true
			}
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	return refs, nil
}

// forgetObjects deletes the objects named in names (those the forgotten conversation's
// stubs refer to) but those in keep (named by a message of the new conversation too),
// each with its chunks and its metadata, and returns how many it deleted. An object
// whose description was stored after the tombstone (at, the server's time of it) is
// the new conversation's (stored again for a message published after the forget): it
// stays, and so does a description stored after the one read here (only the revisions
// up to it are purged). A deleted object's metadata marker, which still names it, is
// purged too. A missing bucket holds nothing.
func (s *core) forgetObjects(ctx context.Context, names, keep map[string]bool, at time.Time) (uint64, error) {
	sorted := make([]string, 0, len(names))
	for name := range names {
		if !keep[name] {
			sorted = append(sorted, name)
		}
	}
	slices.Sort(sorted)
	stream := objectsStream(s.cfg.ObjectsBucket)
	var n uint64
	var failed []error
	for _, name := range sorted {
		meta := s.objectMetaSubject(name)
		m, err := s.leaderGet(ctx, stream, map[string]any{"last_by_subj": meta})
		if errors.Is(err, errNoMessage) {
			continue
		}
		if err != nil {
			failed = append(failed, fmt.Errorf("object %s: %w", name, err))
			continue
		}
		if m.Time.After(at) {
			continue // stored after the tombstone: the new conversation's
		}
		var info natsjs.ObjectInfo
		if err := json.Unmarshal(m.Data, &info); err != nil {
			info = natsjs.ObjectInfo{ObjectMeta: natsjs.ObjectMeta{Name: name}, Deleted: true} // no chunks of its own to find
		}
		if err := s.deleteObject(ctx, name, &info); err != nil {
			failed = append(failed, err)
		} else if !info.Deleted {
			n++
		}
		// The name's earlier descriptions stay (the bucket refuses roll-ups), and one
		// written over the object's may name other chunks: the chunks of each are deleted.
		if err := s.deleteEarlierCopies(ctx, name, m.Seq, ChunkIDs(&info)); err != nil {
			failed = append(failed, err)
		}
		if _, err := s.purge(ctx, stream, meta, m.Seq+1); err != nil {
			failed = append(failed, fmt.Errorf("description of %s: %w", name, err))
		}
	}
	return n, errors.Join(failed...)
}

// deleteEarlierCopies deletes the chunks the descriptions of name stored before seq
// name (at most maxDescriptions of them), but those of done, deleted already. Each
// description is checked as deleteObject checks one: its chunks are purged only when
// they are this object's.
func (s *core) deleteEarlierCopies(ctx context.Context, name string, seq uint64, done []string) error {
	stream, meta := objectsStream(s.cfg.ObjectsBucket), s.objectMetaSubject(name)
	var failed []error
	seen := 0
	for from := uint64(1); from < seq && seen < maxDescriptions; {
		page, more, err := s.directBatch(ctx, stream, meta, from, chunkBatch)
		if err != nil {
			return fmt.Errorf("earlier descriptions of %s: %w", name, err)
		}
		for _, m := range page {
			if m.Seq >= seq {
				return errors.Join(failed...)
			}
			seen++
			var info natsjs.ObjectInfo
			if json.Unmarshal(m.Data, &info) != nil || info.Deleted || slices.Contains(done, info.NUID) {
				continue
			}
			done = append(done, info.NUID)
			if info.Opts != nil && info.Opts.Link != nil {
				continue // a link has no chunks of its own
			}
			if info.Bucket != s.cfg.ObjectsBucket || !validNUID(info.NUID) || info.Size > uint64(max(s.cfg.MaxObjectSize, 0)) {
				failed = append(failed, fmt.Errorf("object %s: an earlier description names chunks (bucket %q, chunk id %q) that are not its own; they are left", name, info.Bucket, info.NUID))
				continue
			}
			switch err := s.checkChunks(ctx, name, &info, info.NUID); {
			case errors.Is(err, errIncomplete):
				continue // an earlier copy the age limit removed (or never whole)
			case err != nil:
				failed = append(failed, fmt.Errorf("object %s: the chunks of an earlier description (chunk id %q) are not its own (%v); they are left", name, info.NUID, err))
			default:
				if _, err := s.purge(ctx, stream, "$O."+s.cfg.ObjectsBucket+".C."+info.NUID, 0); err != nil {
					failed = append(failed, fmt.Errorf("chunks of %s: %w", name, err))
				}
			}
		}
		if !more || len(page) == 0 {
			break
		}
		from = page[len(page)-1].Seq + 1
	}
	return errors.Join(failed...)
}

// deleteObject purges an object's chunks. Descriptions are written by producers and may
// be hostile: the chunks are purged by their chunk id only when it is a plain id of
// this bucket (a wildcard would delete every object's) and they are this object's
// (checkChunks: they hold what the name says, and name no other object): a description
// copying another object's chunk id names other bytes, or the same bytes of another
// conversation. nats.go's Delete would trust the description.
func (s *core) deleteObject(ctx context.Context, name string, info *natsjs.ObjectInfo) error {
	switch {
	case info.Opts != nil && info.Opts.Link != nil, info.Deleted:
		return nil // a link has no chunks of its own; a deleted object's are gone
	case info.Bucket != s.cfg.ObjectsBucket || !validNUID(info.NUID) || info.Size > uint64(max(s.cfg.MaxObjectSize, 0)):
		return fmt.Errorf("object %s: its chunks (bucket %q, chunk id %q) are not its own; only its description is deleted", name, info.Bucket, info.NUID)
	}
	if err := s.checkChunks(ctx, name, info, info.NUID); err != nil {
		return fmt.Errorf("object %s: its chunks (chunk id %q) are not its own (%v); only its description is deleted", name, info.NUID, err)
	}
	var failed []error
	for _, id := range ChunkIDs(info) { // its chunks and those of its earlier copies
		if id != info.NUID {
			err := s.checkChunks(ctx, name, info, id)
			if errors.Is(err, errIncomplete) {
				continue // an earlier copy the bucket's age limit already removed (or never whole)
			}
			if err != nil {
				failed = append(failed, fmt.Errorf("object %s: the chunks of an earlier copy (chunk id %q) are not its own (%v); they are left", name, id, err))
				continue
			}
		}
		if _, err := s.purge(ctx, objectsStream(s.cfg.ObjectsBucket), "$O."+s.cfg.ObjectsBucket+".C."+id, 0); err != nil {
			failed = append(failed, fmt.Errorf("chunks of %s: %w", name, err))
		}
	}
	return errors.Join(failed...)
}

// errOtherOwner is chunks whose first one names (ChunkOwnerHeader) another object.
var errOtherOwner = errors.New("they were written for another object")

// checkChunks reads the chunks stored under chunk id (the object's own, or an earlier
// copy's the description lists) and checks that they are this object's: a hostile
// description may name another object's chunks, and names of the same content in two
// conversations share the hash. They must hold what the name says (<conv>/<SHA-256 of
// the object>), and when their first one names its object (ChunkOwnerHeader, set by
// Objects.Put) it must name this one. Chunks without the header (written by nats.go or
// nats.js) have only the hash check, which another conversation's copy of the same
// content passes. An earlier copy holds the same bytes in as many chunks as it took then.
func (s *core) checkChunks(ctx context.Context, name string, info *natsjs.ObjectInfo, id string) error {
	copyInfo := *info
	copyInfo.NUID = id
	if id != info.NUID {
		copyInfo.Chunks = uint32(min(info.Size+1, math.MaxUint32))
	}
	body, err := s.readChunks(ctx, &copyInfo, func(m StoredMsg) error {
		if owner := m.Header.Get(ChunkOwnerHeader); owner != "" && owner != name {
			return errOtherOwner // the other object's name is not repeated to the forget's caller
		}
		return nil
	})
	if err == nil && schemas.ObjectName(name[:strings.LastIndexByte(name, '/')], body) != name {
		err = errors.New("they do not hold what its name says")
	}
	return err
}

// Live reads a conversation's value as a reader may serve it, with the conversation's
// tombstone (nil when it was not forgotten within the forget bucket's TTL). A value the
// tombstone covers (FirstSeq <= through_seq: it holds something of the forgotten
// conversation, left by a writer that died or gave up before taking it back) is not
// returned: v is nil and rev 0, as for a conversation never compacted. A reader then
// reads CHAT only above the tombstone's through_seq.
//
// The value is read first and the tombstone after it, so a covered value written at
// any time before the tombstone is read is dropped. With fromLeader both come from the
// streams' leaders; otherwise any replica may answer, and the tombstone read is one
// batched direct get shared with the other readers of the moment.
func (rs *Results) Live(ctx context.Context, conv string, fromLeader bool) (v *schemas.Result, rev uint64, tomb *schemas.Tombstone, err error) {
	if v, rev, err = rs.Get(ctx, conv, fromLeader); err != nil {
		return nil, 0, nil, err
	}
	if tomb, err = rs.tombstone(ctx, conv, fromLeader); err != nil {
		return nil, 0, nil, err
	}
	if v != nil && tomb.Covers(v.FirstSeq) {
		return nil, 0, tomb, nil
	}
	return v, rev, tomb, nil
}

// tombstone reads a conversation's tombstone from the forget bucket's leader, or with a
// coalesced direct get from any replica.
func (rs *Results) tombstone(ctx context.Context, conv string, fromLeader bool) (*schemas.Tombstone, error) {
	if fromLeader {
		return rs.forgotten(ctx, conv)
	}
	m, err := rs.lastForget.queueRead("$KV." + rs.cfg.ForgetBucket + "." + schemas.ForgetKey(conv)).wait(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the tombstone of %s: %w", conv, err)
	}
	if m == nil || kvDeleted(m) {
		return nil, nil
	}
	var t schemas.Tombstone
	if err := json.Unmarshal(m.Data, &t); err != nil {
		return nil, fmt.Errorf("the tombstone of %s does not decode: %w", conv, err)
	}
	return &t, nil
}

// ForgetGrace is how long after a tombstone a value written before it is left to the
// forget that runs (its deletions take seconds; the erase of raw history at most
// EraseBudget), by the sweep and the trigger: the forget counts what it deletes.
const ForgetGrace = 2 * time.Minute

// SweepForgotten removes every value of the results bucket that the tombstone of its
// conversation covers and returns how many it removed: the backstop for a writer that
// died between its write and its tombstone check, after the forget had deleted its
// request, of a conversation no job or trigger met since. Run more often than
// tombstones expire (the api role runs it every quarter of ForgetTTL), no such value
// outlives its tombstone. It lists the keys of the forget bucket (the forgets of the
// last ForgetTTL) and of the results bucket, matches them by hash, and reads from the
// leaders, and removes, only values of forgotten conversations. A value written before
// the forget is left to it for ForgetGrace.
func (s *Store) SweepForgotten(ctx context.Context) (int, error) {
	tombs, err := s.listKeys(ctx, s.cfg.ForgetBucket)
	if err != nil || len(tombs) == 0 {
		return 0, err
	}
	keys, err := s.listKeys(ctx, s.cfg.ResultsBucket)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for conv := range keys {
		if !tombs[schemas.ForgetKey(conv)] || schemas.ValidateConversationID(conv) != nil {
			continue
		}
		v, rev, err := s.results.Get(ctx, conv, true)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		tomb, err := s.forgotten(ctx, conv)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if v == nil || !tomb.Covers(v.FirstSeq) || (!v.CreatedAt.After(tomb.ForgottenAt) && time.Since(tomb.ForgottenAt) < ForgetGrace) {
			continue
		}
		if err := s.results.Remove(ctx, conv, rev); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// listKeys returns the keys of a bucket.
func (s *Store) listKeys(ctx context.Context, bucket string) (map[string]bool, error) {
	kv, err := s.js.KeyValue(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", bucket, err)
	}
	l, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list the keys of %s: %w", bucket, err)
	}
	defer func() { _ = l.Stop() }()
	out := map[string]bool{}
	for k := range l.Keys() {
		out[k] = true
	}
	return out, ctx.Err()
}
