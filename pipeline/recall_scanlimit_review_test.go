package pipeline_test

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
)

// Review of issue 12: Client.Recall says "An invalid option is a
// *schemas.ValidationError naming it", and its siblings (FromSeq, MaxTokens, Query) are;
// a negative ScanLimit is a plain wrapped ErrInvalid without a field.
func TestRecallInvalidScanLimitIsAValidationError(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		c := pipeline.NewWithStore(nc, st)
		_, err := c.Recall(ctxT(t), "sl", pipeline.ScanLimit(-1))
		if err == nil {
			t.Fatal("ScanLimit(-1) was accepted")
		}
		var ve *schemas.ValidationError
		if !errors.As(err, &ve) {
			t.Fatalf("ScanLimit(-1): error %v (%T) is not a *schemas.ValidationError", err, err)
		}
	})
}
