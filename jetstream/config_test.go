package jetstream

import (
	"reflect"
	"strings"
	"testing"
)

func TestNamespacedNamesKeepEveryNameApart(t *testing.T) {
	def := reflect.ValueOf(DefaultNames())
	got := reflect.ValueOf(NamespacedNames("bench7"))
	for i := range def.NumField() {
		name := def.Type().Field(i).Name
		d, g := def.Field(i).String(), got.Field(i).String()
		if name == "TriggerGroup" {
			if g != d {
				t.Errorf("%s = %q; want the contract's %q (a consumer's group, not a server name)", name, g, d)
			}
			continue
		}
		if g == d || !strings.Contains(strings.ToLower(g), "bench7") {
			t.Errorf("%s = %q; want a name holding the namespace, apart from the contract's %q", name, g, d)
		}
	}
}
