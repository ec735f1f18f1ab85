package pipeline

import (
	"context"

	"github.com/compactor/compactor/schemas"
)

// Pending returns the conversation's compaction request that waits in the work queue
// or is being worked on, nil when there is none: what `compactor status <conv>`, the
// service's status and the web view show as pending. In service mode it asks
// compactor.status, which tells the request's id only: the other fields are zero.
func (c *Client) Pending(ctx context.Context, conv string) (*schemas.Request, error) {
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
