package rounds_test

import (
	"reflect"
	"testing"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/rounds"
)

// Entry builders; seq is the CHAT sequence.

func user(seq uint64) schemas.Entry {
	return schemas.Entry{Seq: seq, Message: schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("u")}}
}

func system(seq uint64) schemas.Entry {
	return schemas.Entry{Seq: seq, Message: schemas.Message{Role: schemas.RoleSystem, Content: schemas.Text("s")}}
}

func say(seq uint64) schemas.Entry {
	return schemas.Entry{Seq: seq, Message: schemas.Message{Role: schemas.RoleAssistant, Content: schemas.Text("a")}}
}

func call(seq uint64, ids ...string) schemas.Entry {
	m := schemas.Message{Role: schemas.RoleAssistant}
	for _, id := range ids {
		m.ToolCalls = append(m.ToolCalls, schemas.ToolCall{ID: id, Type: "function", Function: schemas.FunctionCall{Name: "f"}})
	}
	return schemas.Entry{Seq: seq, Message: m}
}

func result(seq uint64, id string) schemas.Entry {
	return schemas.Entry{Seq: seq, Message: schemas.Message{Role: schemas.RoleTool, Content: schemas.Text("r"), ToolCallID: id}}
}

func bad(seq uint64) schemas.Entry {
	return schemas.Entry{Seq: seq, Err: &schemas.ValidationError{Field: "role", Rule: "is required"}}
}

func es(entries ...schemas.Entry) []schemas.Entry { return entries }

func TestUnits(t *testing.T) {
	tests := []struct {
		name string
		give []schemas.Entry
		want []rounds.Unit
	}{
		{name: "empty", give: nil, want: nil},
		{
			name: "single messages",
			give: es(system(1), user(2), say(3)),
			want: []rounds.Unit{
				{Start: 0, End: 1, Kind: rounds.Single, Complete: true},
				{Start: 1, End: 2, Kind: rounds.Single, Complete: true},
				{Start: 2, End: 3, Kind: rounds.Single, Complete: true},
			},
		},
		{
			name: "one round",
			give: es(user(1), call(2, "a"), result(3, "a"), say(4)),
			want: []rounds.Unit{
				{Start: 0, End: 1, Kind: rounds.Single, Complete: true},
				{Start: 1, End: 3, Kind: rounds.Round, Complete: true},
				{Start: 3, End: 4, Kind: rounds.Single, Complete: true},
			},
		},
		{
			name: "parallel calls answered out of order",
			give: es(call(1, "a", "b", "c"), result(2, "b"), result(3, "c"), result(4, "a"), user(5)),
			want: []rounds.Unit{
				{Start: 0, End: 4, Kind: rounds.Round, Complete: true},
				{Start: 4, End: 5, Kind: rounds.Single, Complete: true},
			},
		},
		{
			name: "user message interleaved inside a round",
			give: es(call(1, "a", "b"), result(2, "a"), user(3), result(4, "b"), say(5)),
			want: []rounds.Unit{
				{Start: 0, End: 4, Kind: rounds.Round, Complete: true},
				{Start: 4, End: 5, Kind: rounds.Single, Complete: true},
			},
		},
		{
			name: "two rounds in a row",
			give: es(call(1, "a"), result(2, "a"), call(3, "b"), result(4, "b")),
			want: []rounds.Unit{
				{Start: 0, End: 2, Kind: rounds.Round, Complete: true},
				{Start: 2, End: 4, Kind: rounds.Round, Complete: true},
			},
		},
		{
			name: "incomplete round at the end",
			give: es(user(1), call(2, "a", "b"), result(3, "a")),
			want: []rounds.Unit{
				{Start: 0, End: 1, Kind: rounds.Single, Complete: true},
				{Start: 1, End: 3, Kind: rounds.Round, Pending: []string{"b"}},
			},
		},
		{
			name: "call with no result yet",
			give: es(user(1), call(2, "a", "b")),
			want: []rounds.Unit{
				{Start: 0, End: 1, Kind: rounds.Single, Complete: true},
				{Start: 1, End: 2, Kind: rounds.Round, Pending: []string{"a", "b"}},
			},
		},
		{
			name: "abandoned round",
			give: es(call(1, "a", "b"), result(2, "a"), say(3), result(4, "b")),
			want: []rounds.Unit{
				{Start: 0, End: 2, Kind: rounds.Round, Pending: []string{"b"}},
				{Start: 2, End: 3, Kind: rounds.Single, Complete: true},
				{Start: 3, End: 4, Kind: rounds.Orphan, Complete: true},
			},
		},
		{
			name: "round abandoned by another round",
			give: es(call(1, "a"), call(2, "b"), result(3, "b")),
			want: []rounds.Unit{
				{Start: 0, End: 1, Kind: rounds.Round, Pending: []string{"a"}},
				{Start: 1, End: 3, Kind: rounds.Round, Complete: true},
			},
		},
		{
			name: "orphan tool results",
			give: es(user(1), result(2, "x"), result(3, "y")),
			want: []rounds.Unit{
				{Start: 0, End: 1, Kind: rounds.Single, Complete: true},
				{Start: 1, End: 2, Kind: rounds.Orphan, Complete: true},
				{Start: 2, End: 3, Kind: rounds.Orphan, Complete: true},
			},
		},
		{
			name: "duplicate results",
			give: es(call(1, "a", "b"), result(2, "a"), result(3, "a"), result(4, "b"), result(5, "b")),
			want: []rounds.Unit{
				{Start: 0, End: 4, Kind: rounds.Round, Complete: true},
				{Start: 4, End: 5, Kind: rounds.Orphan, Complete: true},
			},
		},
		{
			name: "unrelated result inside a round",
			give: es(call(1, "a"), result(2, "z"), result(3, "a")),
			want: []rounds.Unit{{Start: 0, End: 3, Kind: rounds.Round, Complete: true}},
		},
		{
			name: "invalid entries",
			give: es(bad(1), user(2), call(3, "a"), bad(4), result(5, "a"), bad(6)),
			want: []rounds.Unit{
				{Start: 0, End: 1, Kind: rounds.Invalid, Complete: true},
				{Start: 1, End: 2, Kind: rounds.Single, Complete: true},
				{Start: 2, End: 5, Kind: rounds.Round, Complete: true},
				{Start: 5, End: 6, Kind: rounds.Invalid, Complete: true},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := rounds.Units(tt.give)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %+v; want %+v", got, tt.want)
			}
		})
	}
}

func TestKindString(t *testing.T) {
	tests := []struct {
		give rounds.Kind
		want string
	}{
		{rounds.Single, "single"}, {rounds.Round, "round"}, {rounds.Orphan, "orphan"},
		{rounds.Invalid, "invalid"}, {rounds.Kind(9), "kind(9)"},
	}
	for _, tt := range tests {
		if got := tt.give.String(); got != tt.want {
			t.Errorf("Kind(%d).String() got %q; want %q", int(tt.give), got, tt.want)
		}
	}
}

func TestPending(t *testing.T) {
	tests := []struct {
		name string
		give []schemas.Entry
		want []string
	}{
		{name: "empty", give: nil, want: nil},
		{name: "no calls", give: es(user(1), say(2)), want: nil},
		{name: "complete", give: es(call(1, "a"), result(2, "a")), want: nil},
		{name: "nothing answered", give: es(user(1), call(2, "a", "b")), want: []string{"a", "b"}},
		{name: "partly answered", give: es(call(1, "a", "b", "c"), result(2, "b")), want: []string{"a", "c"}},
		{name: "user interleaved while waiting", give: es(call(1, "a"), user(2)), want: []string{"a"}},
		{name: "invalid entry while waiting", give: es(call(1, "a"), bad(2)), want: []string{"a"}},
		{name: "abandoned round is not pending", give: es(call(1, "a"), say(2)), want: nil},
		{name: "orphan after a complete round", give: es(call(1, "a"), result(2, "a"), result(3, "a")), want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := rounds.Pending(tt.give); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %v; want %v", got, tt.want)
			}
		})
	}
}

func TestBoundaries(t *testing.T) {
	// Units start at 0, 1 and 5; the round es[1:5] holds an interleaved user message.
	conv := es(user(1), call(2, "a", "b"), result(3, "a"), user(4), result(5, "b"), say(6))
	incomplete := es(user(1), call(2, "a"), user(3))
	tests := []struct {
		name        string
		give        []schemas.Entry
		k           int
		wantBound   bool
		wantForward int
		wantBack    int
	}{
		{name: "before the start", give: conv, k: -1, wantBound: true, wantForward: 0, wantBack: 0},
		{name: "start", give: conv, k: 0, wantBound: true, wantForward: 0, wantBack: 0},
		{name: "round start", give: conv, k: 1, wantBound: true, wantForward: 1, wantBack: 1},
		{name: "after the call", give: conv, k: 2, wantBound: false, wantForward: 5, wantBack: 1},
		{name: "at the interleaved message", give: conv, k: 3, wantBound: false, wantForward: 5, wantBack: 1},
		{name: "before the last result", give: conv, k: 4, wantBound: false, wantForward: 5, wantBack: 1},
		{name: "after the round", give: conv, k: 5, wantBound: true, wantForward: 5, wantBack: 5},
		{name: "end", give: conv, k: 6, wantBound: true, wantForward: 6, wantBack: 6},
		{name: "past the end", give: conv, k: 9, wantBound: true, wantForward: 6, wantBack: 6},
		{name: "inside an open round", give: incomplete, k: 2, wantBound: false, wantForward: 3, wantBack: 1},
		{name: "empty", give: nil, k: 0, wantBound: true, wantForward: 0, wantBack: 0},
		{name: "empty past the end", give: nil, k: 3, wantBound: true, wantForward: 0, wantBack: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := rounds.IsBoundary(tt.give, tt.k); got != tt.wantBound {
				t.Errorf("IsBoundary(%d) got %v; want %v", tt.k, got, tt.wantBound)
			}
			if got := rounds.SnapForward(tt.give, tt.k); got != tt.wantForward {
				t.Errorf("SnapForward(%d) got %d; want %d", tt.k, got, tt.wantForward)
			}
			if got := rounds.SnapBack(tt.give, tt.k); got != tt.wantBack {
				t.Errorf("SnapBack(%d) got %d; want %d", tt.k, got, tt.wantBack)
			}
		})
	}
}

func TestNormalize(t *testing.T) {
	invalid := "invalid message: role: is required"
	tests := []struct {
		name        string
		give        []schemas.Entry
		wantKept    []uint64
		wantSkipped []rounds.Skipped
	}{
		{name: "empty", give: nil, wantKept: []uint64{}},
		{name: "singles", give: es(system(1), user(2), say(3)), wantKept: []uint64{1, 2, 3}},
		{
			name:     "parallel calls stay together in arrival order",
			give:     es(call(1, "a", "b"), result(2, "b"), result(3, "a"), say(4)),
			wantKept: []uint64{1, 2, 3, 4},
		},
		{
			name:     "interleaved messages move after the round",
			give:     es(call(1, "a", "b"), result(2, "a"), user(3), system(4), result(5, "b"), say(6)),
			wantKept: []uint64{1, 2, 5, 3, 4, 6},
		},
		{
			name:     "incomplete round at the end",
			give:     es(user(1), call(2, "a", "b"), result(3, "a"), user(4)),
			wantKept: []uint64{1, 4},
			wantSkipped: []rounds.Skipped{
				{Seq: 2, Reason: "tool round incomplete: no result yet for [b]"},
				{Seq: 3, Reason: "part of an incomplete tool round"},
			},
		},
		{
			name:     "abandoned round",
			give:     es(call(1, "a", "b"), result(2, "a"), say(3), result(4, "b")),
			wantKept: []uint64{3},
			wantSkipped: []rounds.Skipped{
				{Seq: 1, Reason: "tool round incomplete: no result yet for [b]"},
				{Seq: 2, Reason: "part of an incomplete tool round"},
				{Seq: 4, Reason: `tool result "b" answers no open tool call`},
			},
		},
		{
			name:        "orphan tool result",
			give:        es(user(1), result(2, "x")),
			wantKept:    []uint64{1},
			wantSkipped: []rounds.Skipped{{Seq: 2, Reason: `tool result "x" answers no open tool call`}},
		},
		{
			name:     "duplicate results",
			give:     es(call(1, "a", "b"), result(2, "a"), result(3, "a"), result(4, "b"), result(5, "b")),
			wantKept: []uint64{1, 2, 4},
			wantSkipped: []rounds.Skipped{
				{Seq: 3, Reason: `tool result "a" answers no open tool call`},
				{Seq: 5, Reason: `tool result "b" answers no open tool call`},
			},
		},
		{
			name:        "invalid entries",
			give:        es(bad(1), user(2), call(3, "a"), bad(4), result(5, "a")),
			wantKept:    []uint64{2, 3, 5},
			wantSkipped: []rounds.Skipped{{Seq: 1, Reason: invalid}, {Seq: 4, Reason: invalid}},
		},
		{
			name:     "invalid entry inside an incomplete round",
			give:     es(call(1, "a"), bad(2), user(3)),
			wantKept: []uint64{3},
			wantSkipped: []rounds.Skipped{
				{Seq: 1, Reason: "tool round incomplete: no result yet for [a]"},
				{Seq: 2, Reason: invalid},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kept, skipped := rounds.Normalize(tt.give)
			gotKept := []uint64{}
			for _, e := range kept {
				gotKept = append(gotKept, e.Seq)
			}
			if !reflect.DeepEqual(gotKept, tt.wantKept) {
				t.Errorf("kept got %v; want %v", gotKept, tt.wantKept)
			}
			if !reflect.DeepEqual(skipped, tt.wantSkipped) {
				t.Errorf("skipped got %+v; want %+v", skipped, tt.wantSkipped)
			}
			if len(kept)+len(skipped) != len(tt.give) {
				t.Errorf("kept %d + skipped %d; want every one of %d entries accounted for", len(kept), len(skipped), len(tt.give))
			}
		})
	}
}

func TestNormalizeKeepsEntries(t *testing.T) {
	give := es(call(1, "a"), result(2, "a"))
	give[1].Message.Meta = map[string]string{"k": "v"}
	kept, _ := rounds.Normalize(give)
	if !reflect.DeepEqual(kept, give) {
		t.Fatalf("got %+v; want the entries unchanged %+v", kept, give)
	}
}

// TestCheckPairs: CheckPairs checks invariant 1 on assembled messages: every assistant tool call is
// followed, before anything else, by exactly one result for each of its calls, and no
// tool message appears without its call.
func TestCheckPairs(t *testing.T) {
	call := func(ids ...string) schemas.Message {
		m := schemas.Message{Role: schemas.RoleAssistant}
		for _, id := range ids {
			m.ToolCalls = append(m.ToolCalls, schemas.ToolCall{ID: id, Type: "function", Function: schemas.FunctionCall{Name: "f"}})
		}
		return m
	}
	res := func(id string) schemas.Message { return schemas.Message{Role: schemas.RoleTool, ToolCallID: id} }
	user := schemas.Message{Role: schemas.RoleUser}
	tests := []struct {
		name    string
		give    []schemas.Message
		wantErr bool
	}{
		{name: "empty", give: nil},
		{name: "paired", give: []schemas.Message{user, call("a", "b"), res("b"), res("a"), user}},
		{name: "orphan result", give: []schemas.Message{user, res("a")}, wantErr: true},
		{name: "missing result", give: []schemas.Message{call("a", "b"), res("a")}, wantErr: true},
		{name: "message inside a round", give: []schemas.Message{call("a", "b"), res("a"), user, res("b")}, wantErr: true},
		{name: "duplicate result", give: []schemas.Message{call("a"), res("a"), res("a")}, wantErr: true},
		{name: "calls on a user", give: []schemas.Message{{Role: schemas.RoleUser, ToolCalls: call("a").ToolCalls}}, wantErr: true},
	}
	for _, tt := range tests {
		if err := rounds.CheckPairs(tt.give); (err != nil) != tt.wantErr {
			t.Errorf("%s: got %v; want error %v", tt.name, err, tt.wantErr)
		}
	}
}
