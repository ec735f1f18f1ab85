package pipeline

import (
	"context"

	"github.com/compactor/compactor/schemas"
)

// Pending returns the conversation's compaction request that waits in the work queue
// or is being worked on, nil when there is none: what `compactor status <conv>`, the
// service's status and the web view show as pending.
func (c *Client) Pending(ctx context.Context, conv string) (*schemas.Request, error) {
	if err := schemas.ValidateConversationID(conv); err != nil {
		return nil, err
	}
	return c.store.Queue().Pending(ctx, conv)
}
