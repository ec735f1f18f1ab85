package split

import (
	"fmt"
	"strings"
	"testing"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/rounds"
)

func entries(ms ...schemas.Message) []schemas.Entry {
	es := make([]schemas.Entry, len(ms))
	for i, m := range ms {
		es[i] = schemas.Entry{Seq: uint64(i + 1), Message: m}
	}
	return es
}

func user(s string) schemas.Message {
	return schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(s)}
}
func sys(s string) schemas.Message {
	return schemas.Message{Role: schemas.RoleSystem, Content: schemas.Text(s)}
}
func reply(s string) schemas.Message {
	return schemas.Message{Role: schemas.RoleAssistant, Content: schemas.Text(s)}
}
func calls(ids ...string) schemas.Message {
	m := schemas.Message{Role: schemas.RoleAssistant}
	for _, id := range ids {
		m.ToolCalls = append(m.ToolCalls, schemas.ToolCall{ID: id, Type: "function", Function: schemas.FunctionCall{Name: "f", Arguments: "{}"}})
	}
	return m
}
func result(id, s string) schemas.Message {
	return schemas.Message{Role: schemas.RoleTool, ToolCallID: id, Content: schemas.Text(s)}
}
func pin(m schemas.Message) schemas.Message { m.Meta = map[string]string{"pin": "true"}; return m }

func TestLastN(t *testing.T) {
	big := strings.Repeat("x", 4000) // ~1000 tokens
	tests := []struct {
		name string
		give []schemas.Entry
		p    Params
		want int
	}{
		{"keeps the last n", entries(user("a"), reply("b"), user("c"), reply("d")), Params{KeepLastN: 2, TailBudget: 1000}, 2},
		{"n larger than history keeps all", entries(user("a"), reply("b")), Params{KeepLastN: 20, TailBudget: 1000}, 0},
		{"budget cuts before n", entries(user(big), user("a"), user(big), user("b")), Params{KeepLastN: 20, TailBudget: 1100}, 1},
		{"never inside a round: the round goes whole or not at all",
			entries(user("a"), calls("1", "2"), result("1", "r"), result("2", "r"), reply("done")), Params{KeepLastN: 2, TailBudget: 1000}, 4},
		{"a round that fits goes whole",
			entries(user("a"), calls("1", "2"), result("1", "r"), result("2", "r"), reply("done")), Params{KeepLastN: 4, TailBudget: 1000}, 1},
		{"an open round at the end stays even over budget",
			entries(user("a"), reply("b"), calls("1"), result("2", big)), Params{KeepLastN: 1, TailBudget: 10}, 2},
		{"empty", nil, Params{KeepLastN: 3, TailBudget: 100}, 0},
		{"zero budget covers everything closed", entries(user("a"), reply("b")), Params{KeepLastN: 3, TailBudget: 0}, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := LastN(tc.give, tc.p)
			if got != tc.want {
				t.Fatalf("got %d; want %d", got, tc.want)
			}
			if !rounds.IsBoundary(tc.give, got) {
				t.Fatalf("split %d is inside a tool round", got)
			}
		})
	}
}

// PinnedWith pins the messages named by sequence (the pins policy key) as meta.pin
// does: a named message of a tool round pins the whole round; a sequence not among the
// entries, or of an invalid entry, pins nothing.
func TestPinnedWith(t *testing.T) {
	es := entries(user("a"), calls("1", "2"), result("1", "r"), result("2", "r"), reply("x"), user("y"))
	es = append(es, schemas.Entry{Seq: 7, Err: fmt.Errorf("bad")})
	for _, tc := range []struct {
		name string
		seqs []uint64
		want string
	}{
		{"none", nil, "......."},
		{"a single message", []uint64{6}, ".....p."},
		{"a result pins its round", []uint64{4}, ".ppp..."},
		{"the call pins its round", []uint64{2}, ".ppp..."},
		{"unknown and invalid", []uint64{99, 7}, "......."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			for _, p := range PinnedWith(es, false, tc.seqs) {
				b.WriteByte(map[bool]byte{true: 'p', false: '.'}[p])
			}
			if b.String() != tc.want {
				t.Fatalf("got %s; want %s", b.String(), tc.want)
			}
		})
	}
}

func TestPinned(t *testing.T) {
	tests := []struct {
		name    string
		give    []schemas.Entry
		leading bool
		want    string // one character per entry: p pinned, . not
	}{
		{"leading system prompt", entries(sys("a"), sys("b"), user("c"), sys("d")), true, "pp.."},
		{"not from the start", entries(sys("a"), user("c")), false, ".."},
		{"meta pin", entries(user("a"), pin(user("b")), reply("c")), false, ".p."},
		{"a pin inside a round pins the round", entries(user("a"), calls("1", "2"), pin(result("1", "r")), result("2", "r"), reply("x")), false, ".ppp."},
		{"invalid entries are never pinned", append(entries(sys("a")), schemas.Entry{Seq: 9, Err: fmt.Errorf("bad")}), true, "p."},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			for _, p := range Pinned(tc.give, tc.leading) {
				b.WriteByte(map[bool]byte{true: 'p', false: '.'}[p])
			}
			if b.String() != tc.want {
				t.Fatalf("got %s; want %s", b.String(), tc.want)
			}
		})
	}
}
