package pipeline

import (
	"context"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas"
)

// Pending returns the conversation's compaction request that waits in the work queue
// or is being worked on, nil when there is none: what `compactor status <conv>`, the
// service's status and the web view show as pending. In service mode it asks
// compactor.status, which tells the request's id only: the other fields are zero.
func (c *Client) Pending(ctx context.Context, conv string) (_ *schemas.Request, err error) {
	ctx, done := c.readable(ctx, c.config().RequestsStream)
	defer func() { err = done(err) }()
	if err := schemas.ValidateConversationID(conv); err != nil {
		return nil, err
	}
	if c.svc != nil {
		st, err := c.serviceStatus(ctx, conv)
		if err != nil || !st.Pending {
			return nil, err
		}
		return &schemas.Request{RequestID: st.PendingRequestID, Conversation: conv}, nil
	}
	return c.store.Queue().Pending(ctx, conv)
}

// PipelineStatus is the streams and consumers of the pipeline this client uses: read
// directly, or in service mode asked of the compactor service (compactor.status without a
// conversation), which answers with its tenant's own streams to a tenant's user.
func (c *Client) PipelineStatus(ctx context.Context) (jetstream.Status, error) {
	if c.svc == nil {
		return c.store.Status(ctx), nil
	}
	var st jetstream.Status
	if err := c.call(ctx, schemas.StatusSubject, 0, struct{}{}, &st); err != nil {
		return jetstream.Status{}, err
	}
	if len(st.Streams) == 0 {
		return jetstream.Status{}, badAnswer(schemas.StatusSubject, "the pipeline's status names no stream")
	}
	return st, nil
}
