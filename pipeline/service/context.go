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
	rendered, err := pipeline.NewWithStore(s.nc, s.store).Render(ctx, in.Conversation, formats.Format(in.Format))
	if err != nil {
		return nil, internal(in.Conversation, err)
	}
	out.Format, out.Rendered = in.Format, rendered.JSON
	body, err := json.Marshal(out)
	if err != nil {
		return nil, internal(in.Conversation, err)
	}
	if max := s.nc.MaxPayload(); int64(len(body)) > max {
		return nil, &apiError{code: 413, msg: fmt.Sprintf("format: the context of %s rendered as %s is %d bytes, over the max payload of %d bytes; "+
			"render it on the client instead (Go: pipeline.Client.Render; command line: compactor context --format), "+
			"which reads the tail with batched direct gets", in.Conversation, in.Format, len(body), max)}
	}
	return json.RawMessage(body), nil
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
