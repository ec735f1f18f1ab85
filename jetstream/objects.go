package jetstream

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/schemas"
)

// Objects is the handle on the objects bucket, where contents over the max payload
// are stored: it stores and reads them, and resolves the entries that refer to them.
// Store.Objects returns it.
type Objects struct{ *core }

// Messages over the server's max payload: a client stores what makes them large as an
// object of the objects bucket and publishes a stub with a schemas.ContentRef instead
// (schemas.Message.Offload); readers fetch the object and restore the message. Objects
// are written in the format of nats.go's object store, which every NATS client reads
// (each chunk also naming its object: ChunkOwnerHeader), and read here with batched
// direct gets of their chunks: bounded by the reference's size before a byte is read,
// without an ephemeral consumer (a reader needs get rights only),
// never following a link to another object or bucket, and with the stream leader's word
// when a replica has not caught up.

var (
	// ErrObjectMissing is matched by the error of a stub whose object is gone (deleted,
	// purged, aged out, never stored) or corrupt (not the length or SHA-256 the
	// reference names). Objects.Resolve turns such a stub into an invalid entry:
	// readers skip and report it, like a pinned message that left CHAT.
	ErrObjectMissing = errors.New("stored object is missing")
	// ErrObjectRefused is matched by the error of a reference no reader follows: to
	// another conversation's object or another bucket, to an object over
	// Config.MaxObjectSize, to a link, or to an object that does not restore a valid
	// message. Objects.Resolve turns such a stub into an invalid entry too.
	ErrObjectRefused = errors.New("content reference refused")
	// ErrTooLarge is matched by the error of a message no publish can carry: still over
	// the max payload without its content, or with an object over Config.MaxObjectSize.
	ErrTooLarge = errors.New("message too large")
)

// HeaderRoom is what a chat publish keeps of the server's max payload for its headers
// (Nats-Expected-Stream, Nats-Msg-Id's name), besides the message id itself.
const HeaderRoom = 512

// maxChunk is the chunk size of nats.go's object store, used unless the max payload is
// smaller.
const maxChunk = 128 << 10

// chunkBatch is how many chunks one batched direct get asks for.
const chunkBatch = 16

func objectsStream(bucket string) string { return "OBJ_" + bucket }

// MaxPayload is the largest message the connected server takes (its max_payload).
func (s *Store) MaxPayload() int64 { return s.nc.MaxPayload() }

// InlineLimit is the longest encoded chat message that Chat.Publish may send with
// message id msgID: the server's max payload less HeaderRoom and the id. A longer one
// must be offloaded into an object.
func (ob *Objects) InlineLimit(msgID string) int {
	return int(ob.nc.MaxPayload()) - HeaderRoom - len(msgID)
}

func (s *core) objectMetaSubject(name string) string {
	return "$O." + s.cfg.ObjectsBucket + ".M." + base64.URLEncoding.EncodeToString([]byte(name))
}

// Put stores object under name, an object of conversation conv (<conv>/<sha256>,
// see schemas.Message.Offload). Names are content addressed, so when the bucket holds
// the same bytes already nothing is written: a retried publish stores nothing twice.
// With a finite CHAT max age an object stored more than half a duplicate window ago is
// written again, which restarts its age: the bucket keeps objects for the max age plus
// the duplicate window (Config.ObjectsTTL), so each outlives every message that refers
// to it. An object over Config.MaxObjectSize is refused with ErrTooLarge.
//
// Put never purges (a producer has no purge right: the purge API cannot be limited to
// one object). The chunks of an object written again stay until the bucket's age limit
// removes them; its new description names them (EarlierChunksKey) so that a forget
// finds them. So do the chunks of a store that failed half way, which no description
// names.
func (ob *Objects) Put(ctx context.Context, conv, name string, object []byte) error {
	if err := schemas.ValidateConversationID(conv); err != nil {
		return err
	}
	if name != schemas.ObjectName(conv, object) {
		return fmt.Errorf("object name %q is not %s/<sha256 of the object>", name, conv)
	}
	if n := int64(len(object)); n > ob.cfg.MaxObjectSize {
		return fmt.Errorf("%w: its object of %d bytes is over the max object size of %d bytes", ErrTooLarge, n, ob.cfg.MaxObjectSize)
	}
	info, at, err := ob.objectInfo(ctx, name)
	switch {
	case err == nil && ob.sameObject(info, name, object) && (ob.cfg.ChatMaxAge == 0 || time.Since(at) < ob.cfg.DuplicateWindow/2) &&
		!ob.forgottenSince(ctx, conv, at):
		return nil
	case err != nil && !errors.Is(err, ErrObjectMissing):
		return err
	}
	if _, err := ob.objectStore(ctx); err != nil { // the bucket exists
		return err
	}
	var earlier []string
	if info != nil {
		earlier = ChunkIDs(info)
	}
	if err := ob.write(ctx, name, object, earlier); err != nil {
		return fmt.Errorf("store object %s: %w", name, err)
	}
	return nil
}

// EarlierChunksKey is the key of an object description's metadata that lists, space
// separated, the chunk ids of the object's earlier copies whose chunks may still be
// stored (Put writes an object again without purging them). At most maxEarlierChunks
// are listed, the newest first.
const EarlierChunksKey = "compactor-earlier-chunks"

// maxEarlierChunks bounds EarlierChunksKey: an object written again more often than
// that within the bucket's age limit leaves its oldest chunks to the age limit alone.
const maxEarlierChunks = 64

// ChunkIDs are the chunk ids an object's description names as its own: its current
// one first, then those of its earlier copies (EarlierChunksKey), each a plain id.
// Descriptions are written by producers: a forget still checks that no other
// conversation's object names an id before it purges its chunks.
func ChunkIDs(info *natsjs.ObjectInfo) []string {
	var ids []string
	if validNUID(info.NUID) {
		ids = append(ids, info.NUID)
	}
	for _, id := range strings.Fields(info.Metadata[EarlierChunksKey]) {
		if validNUID(id) && !slices.Contains(ids, id) && len(ids) <= maxEarlierChunks {
			ids = append(ids, id)
		}
	}
	return ids
}

// ChunkOwnerHeader is the header Objects.Put sets on every chunk it writes, naming the
// object the chunks are for. Chunk ids are copied into descriptions a producer may
// write, and object names share the content's hash across conversations: a forget
// purges chunks whose first one names another object under no description. Chunks
// without it (written by nats.go's or nats.js's object store, or before this header)
// are checked against the name's hash alone. Readers of chunk data ignore headers.
const ChunkOwnerHeader = "Compactor-Object"

// write stores object under name in the format of nats.go's object store (chunks on
// a fresh chunk id, each with ChunkOwnerHeader, then the description, which readers
// take over the name's earlier ones), without the purge nats.go's Put makes of the
// earlier chunks (the description lists their ids instead) and without its roll-up of
// the description's subject.
func (ob *Objects) write(ctx context.Context, name string, object []byte, earlier []string) error {
	stream := objectsStream(ob.cfg.ObjectsBucket)
	id := rand.Text() // 26 characters of [A-Z2-7]: a plain chunk id
	subj := "$O." + ob.cfg.ObjectsBucket + ".C." + id
	// Room for the owner header ("Compactor-Object: <name>\r\n") beside HeaderRoom.
	size := max(min(maxChunk, int(ob.nc.MaxPayload())-HeaderRoom-len(ChunkOwnerHeader)-len(name)-4), 1)
	if err := ob.room(ctx, stream, name, object, size); err != nil {
		return err
	}
	h := sha256.New()
	chunks := 0
	for off := 0; off < len(object); off += size {
		part := object[off:min(off+size, len(object))]
		h.Write(part)
		m := nats.NewMsg(subj)
		m.Header.Set(ChunkOwnerHeader, name)
		m.Data = part
		if _, err := ob.js.PublishMsg(ctx, m, natsjs.WithExpectStream(stream)); err != nil {
			return fmt.Errorf("chunk %d: %w", chunks, err)
		}
		chunks++
	}
	info := natsjs.ObjectInfo{
		ObjectMeta: natsjs.ObjectMeta{Name: name, Opts: &natsjs.ObjectMetaOptions{ChunkSize: uint32(size)}},
		Bucket:     ob.cfg.ObjectsBucket, NUID: id, Size: uint64(len(object)), Chunks: uint32(chunks),
		ModTime: time.Now().UTC(), Digest: natsjs.GetObjectDigestValue(h),
	}
	if len(earlier) > 0 {
		info.Metadata = map[string]string{EarlierChunksKey: strings.Join(earlier[:min(len(earlier), maxEarlierChunks)], " ")}
	}
	data, err := json.Marshal(info)
	if err != nil {
		return err
	}
	// A plain publish, without the roll-up header of nats.go's Put: the bucket refuses
	// roll-ups (objectsStreamConfig), and the name's earlier descriptions stay until the
	// age limit or a forget removes them (readers take the newest that is whole).
	m := nats.NewMsg(ob.objectMetaSubject(name))
	m.Data = data
	if _, err := ob.js.PublishMsg(ctx, m, natsjs.WithExpectStream(stream)); err != nil {
		return fmt.Errorf("description: %w", err)
	}
	return nil
}

// room checks, before a chunk is written, that the objects stream's max_bytes (a
// tenant's stored_bytes) leaves room for object: chunks written before the server
// refuses one stay with no description, which no forget finds and a producer may not
// purge, so each retry of a message over the bound would leave more. The stream's own
// configuration is the bound (not this process's), and an object that would pass it
// is refused as the server refuses a publish. Writers racing near the bound can still
// leave the chunks of one object each; a stream whose info cannot be read is written
// as before.
func (ob *Objects) room(ctx context.Context, stream, name string, object []byte, chunkSize int) error {
	str, err := ob.js.Stream(ctx, stream)
	if err != nil {
		return nil
	}
	info := str.CachedInfo()
	if info == nil || info.Config.MaxBytes <= 0 {
		return nil
	}
	chunks := int64(len(object)/chunkSize + 1)
	need := int64(len(object)) + chunks*int64(len(stream)+len(name)+len(ChunkOwnerHeader)+96) + 1024 // subjects, headers, the description
	if int64(info.State.Bytes)+need > info.Config.MaxBytes {
		return fmt.Errorf("store object %s: %d bytes do not fit in %s (%d of its %d stored): maximum bytes exceeded",
			name, len(object), stream, info.State.Bytes, info.Config.MaxBytes)
	}
	return nil
}

// ForgetSince is conv's tombstone when it was written at or after at (the server's
// time), else nil; an error when it cannot be read. A publisher whose object was
// stored (or found stored) from at on asks it once the stub is published: a forget
// since may have deleted the object. A tombstone that covers the stub means the forget
// took the message too, and its object must stay deleted; one before the stub means
// the object is stored again (see pipeline's keepObject).
func (ob *Objects) ForgetSince(ctx context.Context, conv string, at time.Time) (*schemas.Tombstone, error) {
	if err := schemas.ValidateConversationID(conv); err != nil {
		return nil, err
	}
	m, err := ob.lastForget.queueRead("$KV." + ob.cfg.ForgetBucket + "." + schemas.ForgetKey(conv)).wait(ctx)
	switch {
	case err != nil:
		return nil, fmt.Errorf("read the tombstone of %s: %w", conv, err)
	case m == nil || kvDeleted(m) || m.Time.Before(at):
		return nil, nil
	}
	var t schemas.Tombstone
	if err := json.Unmarshal(m.Data, &t); err != nil {
		return nil, fmt.Errorf("the tombstone of %s does not decode: %w", conv, err)
	}
	return &t, nil
}

// forgottenSince reports whether conv was forgotten after at (the server's time its
// object was stored): a forget in progress deletes the objects stored before its
// tombstone, so an object stored before it is stored again for a new message (Put,
// before the stub is published, which no tombstone can cover yet). A tombstone that
// cannot be read counts as one: storing again before the stub is safe.
func (s *core) forgottenSince(ctx context.Context, conv string, at time.Time) bool {
	m, err := s.lastForget.queueRead("$KV." + s.cfg.ForgetBucket + "." + schemas.ForgetKey(conv)).wait(ctx)
	if err != nil {
		return true
	}
	return m != nil && !kvDeleted(m) && !m.Time.Before(at)
}

// sameObject reports whether info describes object, stored whole under name.
func (s *core) sameObject(info *natsjs.ObjectInfo, name string, object []byte) bool {
	sum := sha256.Sum256(object)
	return s.checkInfo(info, &schemas.ContentRef{Name: name, Size: int64(len(object)), SHA256: hex.EncodeToString(sum[:])}) == nil
}

// objectStore binds the objects bucket for writing, once.
func (s *core) objectStore(ctx context.Context) (natsjs.ObjectStore, error) {
	s.objMu.Lock()
	defer s.objMu.Unlock()
	if s.objStore != nil {
		return s.objStore, nil
	}
	obs, err := s.js.ObjectStore(ctx, s.cfg.ObjectsBucket)
	if errors.Is(err, natsjs.ErrBucketNotFound) {
		return nil, fmt.Errorf("objects bucket %s does not exist (a compactor of this version creates it at start, or an admin with its settings): %w",
			s.cfg.ObjectsBucket, err)
	}
	if err != nil {
		return nil, fmt.Errorf("objects bucket %s: %w", s.cfg.ObjectsBucket, err)
	}
	s.objStore = obs
	return obs, nil
}

// objectInfo reads the description of object name from the stream leader, so an object
// stored just before its stub was published is found; a name the bucket does not hold,
// a deleted object and a missing bucket are ErrObjectMissing. at is when it was stored.
func (s *core) objectInfo(ctx context.Context, name string) (info *natsjs.ObjectInfo, at time.Time, err error) {
	m, err := s.leaderGet(ctx, objectsStream(s.cfg.ObjectsBucket), map[string]any{"last_by_subj": s.objectMetaSubject(name)})
	if errors.Is(err, errNoMessage) {
		return nil, time.Time{}, noDescription{fmt.Errorf("%w: %s of bucket %s (deleted, purged, aged out or never stored)", ErrObjectMissing, name, s.cfg.ObjectsBucket)}
	}
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("object %s: %w", name, err)
	}
	info = &natsjs.ObjectInfo{}
	if err := json.Unmarshal(m.Data, info); err != nil {
		return nil, time.Time{}, fmt.Errorf("%w: %s: its description does not decode (corrupt)", ErrObjectMissing, name)
	}
	if info.Deleted {
		return nil, time.Time{}, fmt.Errorf("%w: %s was deleted", ErrObjectMissing, name)
	}
	return info, m.Time, nil
}

// noDescription is the ErrObjectMissing of a name the bucket holds no description of.
type noDescription struct{ error }

func (e noDescription) Unwrap() error { return e.error }

// checkInfo checks an object's description against the reference before anything of
// it is read: a link (to another object or bucket) is refused, and an object whose
// description is not the reference's (another length or digest, another name, chunks
// on a subject with wildcards) is corrupt.
func (s *core) checkInfo(info *natsjs.ObjectInfo, ref *schemas.ContentRef) error {
	corrupt := func(what string) error {
		return fmt.Errorf("%w: %s is corrupt: %s", ErrObjectMissing, ref.Name, what)
	}
	want, _ := hex.DecodeString(ref.SHA256)
	digest, err := natsjs.DecodeObjectDigest(info.Digest)
	switch {
	case info.Opts != nil && info.Opts.Link != nil:
		return fmt.Errorf("%w: %s is a link; links are not followed", ErrObjectRefused, ref.Name)
	case info.Name != ref.Name || info.Bucket != s.cfg.ObjectsBucket:
		return corrupt(fmt.Sprintf("its description names %s of bucket %s", info.Name, info.Bucket))
	case info.Size != uint64(ref.Size):
		return corrupt(fmt.Sprintf("it holds %d bytes, the reference says %d", info.Size, ref.Size))
	case err != nil || !strings.HasPrefix(info.Digest, "SHA-256=") || !bytes.Equal(digest, want):
		return corrupt("its digest is not the reference's sha256")
	case !validNUID(info.NUID) || info.Chunks == 0 || uint64(info.Chunks) > info.Size:
		return corrupt("its chunks are not described")
	}
	return nil
}

func validNUID(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// errIncomplete is an object whose chunks end before its size: it was replaced or
// purged while it was read, or its chunks are gone.
var errIncomplete = errors.New("object chunks end before its size")

// Read fetches the object ref names, for a stub of conversation conv. It refuses
// (ErrObjectRefused) a reference to another conversation's object or another bucket
// and one over Config.MaxObjectSize before sending anything, and reads no more than the
// reference's size; an object that is gone, or not the bytes the reference names, is
// ErrObjectMissing. Any other error is a failure to read (no answer, no permission).
func (ob *Objects) Read(ctx context.Context, conv string, ref *schemas.ContentRef) ([]byte, error) {
	if err := ref.CheckOwner(conv, ob.cfg.ObjectsBucket); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrObjectRefused, err)
	}
	if ref.Size > ob.cfg.MaxObjectSize {
		return nil, fmt.Errorf("%w: %s of %d bytes is over the max object size of %d bytes", ErrObjectRefused, ref.Name, ref.Size, ob.cfg.MaxObjectSize)
	}
	var object []byte
	var err error
	for attempt := 0; attempt < 2; attempt++ {
		var info *natsjs.ObjectInfo
		if info, _, err = ob.objectInfo(ctx, ref.Name); err == nil {
			object, err = ob.readObject(ctx, info, ref)
		}
		if !errors.Is(err, errIncomplete) {
			break // stored again while read (a refresh) is read again: its new chunks are whole
		}
	}
	var none noDescription
	if err == nil || errors.As(err, &none) || !errors.Is(err, ErrObjectMissing) && !errors.Is(err, ErrObjectRefused) && !errors.Is(err, errIncomplete) {
		return object, err
	}
	// The newest description is not whole (a producer may write any name's description,
	// a roll-up of an older bucket may have removed the chunks): an earlier description
	// of the name that is whole still serves.
	if earlier, eerr := ob.earlierObject(ctx, ref); eerr == nil {
		return earlier, nil
	} else if !errors.Is(eerr, ErrObjectMissing) {
		return nil, eerr
	}
	if errors.Is(err, errIncomplete) {
		return nil, fmt.Errorf("%w: %s is corrupt: %v", ErrObjectMissing, ref.Name, err)
	}
	return nil, err
}

// readObject reads the object info describes, checked against ref.
func (s *core) readObject(ctx context.Context, info *natsjs.ObjectInfo, ref *schemas.ContentRef) ([]byte, error) {
	if err := s.checkInfo(info, ref); err != nil {
		return nil, err
	}
	object, err := s.readChunks(ctx, info, nil)
	if err != nil {
		return nil, err
	}
	if sum := sha256.Sum256(object); hex.EncodeToString(sum[:]) != ref.SHA256 {
		return nil, fmt.Errorf("%w: %s is corrupt: its bytes do not hash to the reference's sha256", ErrObjectMissing, ref.Name)
	}
	return object, nil
}

// maxDescriptions bounds the descriptions of one name a reader looks through for a
// whole one, and maxTried how many of them, the newest first, it reads the chunks of.
const (
	maxDescriptions = 1024
	maxTried        = 8
)

// earlierObject reads ref's object from the newest of the name's descriptions whose
// chunks are whole and hash to the reference: descriptions are only added (the bucket
// refuses roll-ups), so one written over the object's, by mistake or by a producer
// that may write any name's, does not hide it. ErrObjectMissing when none is whole.
func (s *core) earlierObject(ctx context.Context, ref *schemas.ContentRef) ([]byte, error) {
	stream, meta := objectsStream(s.cfg.ObjectsBucket), s.objectMetaSubject(ref.Name)
	var descs []StoredMsg
	for from := uint64(1); len(descs) < maxDescriptions; {
		page, more, err := s.directBatch(ctx, stream, meta, from, chunkBatch)
		if err != nil {
			return nil, fmt.Errorf("object %s: %w", ref.Name, err)
		}
		descs = append(descs, page...)
		if !more || len(page) == 0 {
			break
		}
		from = page[len(page)-1].Seq + 1
	}
	tried := 0
	for i := len(descs) - 2; i >= 0 && tried < maxTried; i-- { // the newest was read already
		info := &natsjs.ObjectInfo{}
		if json.Unmarshal(descs[i].Data, info) != nil || info.Deleted || s.checkInfo(info, ref) != nil {
			continue
		}
		tried++
		if object, err := s.readObject(ctx, info, ref); err == nil {
			return object, nil
		} else if !errors.Is(err, ErrObjectMissing) && !errors.Is(err, errIncomplete) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("%w: %s: no description of it is whole", ErrObjectMissing, ref.Name)
}

// readChunks reads the chunks info describes, with batched direct gets (any replica),
// then from the stream leader when a replica's answer ends short. It never holds more
// than info.Size bytes or reads more than info.Chunks chunks. first, when not nil,
// checks the first chunk before anything of it is kept: its error ends the read.
func (s *core) readChunks(ctx context.Context, info *natsjs.ObjectInfo, first func(StoredMsg) error) ([]byte, error) {
	stream := objectsStream(s.cfg.ObjectsBucket)
	subj := "$O." + s.cfg.ObjectsBucket + ".C." + info.NUID
	size := int(info.Size)
	out := make([]byte, 0, size)
	chunks := 0
	from := uint64(1)
	add := func(m StoredMsg) error {
		if chunks == 0 && first != nil {
			if err := first(m); err != nil {
				return err
			}
		}
		chunks++
		if chunks > int(info.Chunks) || len(out)+len(m.Data) > size {
			return fmt.Errorf("%w: %s has more than its %d bytes in %d chunks", ErrObjectMissing, info.Name, size, info.Chunks)
		}
		out = append(out, m.Data...)
		from = m.Seq + 1
		return nil
	}
	for len(out) < size {
		page, more, err := s.directBatch(ctx, stream, subj, from, chunkBatch)
		if err != nil {
			return nil, fmt.Errorf("read object %s: %w", info.Name, err)
		}
		for _, m := range page {
			if err := add(m); err != nil {
				return nil, err
			}
		}
		if !more || len(page) == 0 {
			break
		}
	}
	for len(out) < size {
		m, err := s.leaderGet(ctx, stream, map[string]any{"seq": from, "next_by_subj": subj})
		if errors.Is(err, errNoMessage) {
			return nil, fmt.Errorf("%w: %d of %d bytes", errIncomplete, len(out), size)
		}
		if err != nil {
			return nil, fmt.Errorf("read object %s: %w", info.Name, err)
		}
		if err := add(m); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Resolve restores, in place, every valid stub among es (entries of conversation
// conv) from its object. A stub whose object is missing or corrupt, or whose reference
// is refused, becomes an invalid entry whose Err says why and matches ErrObjectMissing
// or ErrObjectRefused: readers skip and report it instead of failing the read or
// blocking the conversation. Any other failure (no answer, no permission) is returned.
func (ob *Objects) Resolve(ctx context.Context, conv string, es []schemas.Entry) error {
	for i := range es {
		e := &es[i]
		if e.Err != nil || e.Message.ContentRef == nil {
			continue
		}
		ref := e.Message.ContentRef
		object, err := ob.Read(ctx, conv, ref)
		if err == nil {
			var m schemas.Message
			if m, err = e.Message.Restore(object); err == nil {
				e.Message = m
				continue
			}
			err = fmt.Errorf("%w: %v", ErrObjectRefused, err)
		}
		if !errors.Is(err, ErrObjectMissing) && !errors.Is(err, ErrObjectRefused) {
			return fmt.Errorf("resolve message %d: %w", e.Seq, err)
		}
		e.Message, e.Err = schemas.Message{}, fmt.Errorf("content_ref %s: %w", ref.Name, err)
	}
	return nil
}
