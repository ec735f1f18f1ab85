package schemas_test

import (
	"errors"
	"testing"
	"time"

	"github.com/compactor/compactor/schemas"
)

// A request's witness is checked with the request: an older trigger's request without
// one is valid; one that does not fit its range or its up_to_seq is refused, naming it.
func TestRequestWitnessIsValidated(t *testing.T) {
	base := func(w *schemas.Witness) schemas.Request {
		return schemas.Request{RequestID: "r", Conversation: "c", Trigger: schemas.TriggerBudget, RequestedAt: time.Now(), UpToSeq: 10, Witness: w}
	}
	good := &schemas.Witness{FromSeq: 2, ThroughSeq: 10, Count: 3, Sums: []uint64{1, 2, 3, 4}}
	tests := []struct {
		name    string
		give    *schemas.Witness
		wantErr bool
	}{
		{name: "none (an older trigger)", give: nil},
		{name: "valid", give: good},
		{name: "past up_to_seq", give: &schemas.Witness{FromSeq: 2, ThroughSeq: 11, Count: 3, Sums: []uint64{1}}, wantErr: true},
		{name: "range backwards", give: &schemas.Witness{FromSeq: 9, ThroughSeq: 3, Count: 1, Sums: []uint64{1}}, wantErr: true},
		{name: "count over the range", give: &schemas.Witness{FromSeq: 2, ThroughSeq: 3, Count: 3, Sums: []uint64{1}}, wantErr: true},
		{name: "no sums", give: &schemas.Witness{FromSeq: 2, ThroughSeq: 3, Count: 1}, wantErr: true},
		{name: "a sum not under the modulus", give: &schemas.Witness{FromSeq: 2, ThroughSeq: 3, Count: 1, Sums: []uint64{schemas.WitnessModulus}}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := base(tt.give)
			err := r.Validate()
			if tt.wantErr != (err != nil) {
				t.Fatalf("got %v; want error %v", err, tt.wantErr)
			}
			var ve *schemas.ValidationError
			if err != nil && (!errors.As(err, &ve) || ve.Field != "witness") {
				t.Errorf("got %v; want a validation error naming witness", err)
			}
		})
	}
}
