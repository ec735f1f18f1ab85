package schemas

import (
	"reflect"
	"testing"
)

// TestMessageFieldOrder keeps the decoder's list of known fields equal to Message's tags:
// a field missing from the list would be read as unknown and written twice.
func TestMessageFieldOrder(t *testing.T) {
	want := jsonFieldNames(reflect.TypeFor[Message]())
	got := map[string]bool{}
	for _, k := range messageFieldOrder {
		got[k] = true
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("messageFieldOrder got %v; want the JSON fields of Message %v", got, want)
	}
	for k := range want {
		if k != "content" && k != "extra" && messageFieldWant[k] == "" {
			t.Errorf("messageFieldWant has no rule for %q", k)
		}
	}
}
