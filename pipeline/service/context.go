package service

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go/micro"

	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/formats"
)

// onContext answers where a conversation's context starts and, asked for a format, the
// context itself rendered in it (when that fits in the max payload).
func (s *Service) onContext(ctx context.Context, req micro.Request) (any, error) {
	var in schemas.ContextRequest
	if err := decode(req.Data(), &in, false, `{"conversation":"c1","format":"anthropic"}`); err != nil {
		return nil, err
	}
	if err := in.Validate(); err != nil {
		return nil, badRequest(err)
	}
	v, from, last, err := s.valueAndLast(ctx, in.Conversation)
	if err != nil {
		return nil, err
	}
	out := schemas.ContextResponse{Conversation: in.Conversation, Value: v, TailStartSeq: from, LastSeq: last}
	if in.Format == "" {
		return out, nil
	}
	if err := s.checkStoredSize(ctx, in, v, from); err != nil {
		return nil, err
	}
	rendered, err := pipeline.NewWithStore(s.nc, s.store).Render(ctx, in.Conversation, formats.Format(in.Format))
	if err != nil {
		return nil, internal(in.Conversation, err)
	}
	out.Format, out.Rendered = in.Format, rendered.JSON
	body, err := encodeAnswer(out)
	if err != nil {
		return nil, internal(in.Conversation, err)
	}
	if max := s.nc.MaxPayload(); int64(len(body)) > max {
		return nil, &apiError{code: 413, msg: fmt.Sprintf("format: the context of %s rendered as %s is %d bytes, over the max payload of %d bytes; %s",
			in.Conversation, in.Format, len(body), max, renderOnTheClient)}
	}
	return json.RawMessage(body), nil
}

// renderOnTheClient ends a 413 of compactor.context.
const renderOnTheClient = "render it on the client instead (Go: pipeline.Client.Render; command line: compactor context --format), " +
	"which reads the tail with batched direct gets"

// storedFactor is how many max payloads a context may take as stored before it is
// rendered: rendering drops Compactor's metadata, so a context somewhat over the max
// payload as stored may still fit once rendered; one over twice the max payload is
// answered 413 before anything of it is held.
const storedFactor = 2

// checkStoredSize answers 413 when the context is over storedFactor max payloads as
// stored (the value, its pinned messages and the tail from from, a large message counted with its
// object), measured without holding it: the tail is counted in bounded batches and the
// count stops once past the bound, and no object is fetched.
func (s *Service) checkStoredSize(ctx context.Context, in schemas.ContextRequest, v *schemas.Result, from uint64) error {
	maxPayload := s.nc.MaxPayload()
	limit := storedFactor * maxPayload
	n := int64(0)
	if v != nil {
		b, err := json.Marshal(v)
		if err != nil {
			return internal(in.Conversation, err)
		}
		n += 2 * int64(len(b)) // the answer carries the value, and the rendering its summary
		for _, seq := range v.PinnedSeqs {
			if n > limit {
				break
			}
			pinned, err := s.store.Chat().LoadPinned(ctx, in.Conversation, []uint64{seq})
			if err != nil {
				return internal(in.Conversation, err)
			}
			for _, e := range pinned {
				if b, err := e.Message.Encode(); err == nil {
					n += int64(len(b))
				}
				if ref := e.Message.ContentRef; ref != nil {
					n += ref.Size
				}
			}
		}
	}
	if n <= limit {
		tail, over, err := s.store.StoredBytes(ctx, in.Conversation, from, limit-n)
		if err != nil {
			return internal(in.Conversation, err)
		}
		if n += tail; !over {
			return nil
		}
	}
	return &apiError{code: 413, msg: fmt.Sprintf("format: the context of %s is over %d bytes as stored, so rendered as %s it would be over the max payload of %d bytes; %s",
		in.Conversation, limit, in.Format, maxPayload, renderOnTheClient)}
}

// valueAndLast reads the KV value (from the leader), where the tail starts and the
// newest CHAT sequence. A value the forget tombstone covers is not served (nil), and
// the tail starts above what the forget deleted.
func (s *Service) valueAndLast(ctx context.Context, conv string) (v *schemas.Result, from, last uint64, err error) {
	v, _, tomb, err := s.store.Results().Live(ctx, conv, true)
	if err != nil {
		return nil, 0, 0, internal(conv, err)
	}
	from = 1
	if v != nil && v.TailStartSeq > 0 {
		from = v.TailStartSeq
	}
	if tomb != nil && from <= tomb.ThroughSeq {
		from = tomb.ThroughSeq + 1
	}
	if last, err = s.store.Chat().LastSeq(ctx, conv); err != nil {
		return nil, 0, 0, internal(conv, err)
	}
	return v, from, last, nil
}
