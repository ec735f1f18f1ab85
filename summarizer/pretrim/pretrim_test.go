package pretrim_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/tokens"
	"github.com/compactor/compactor/summarizer/pretrim"
)

func user(s string) schemas.Message {
	return schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(s)}
}

func system(s string) schemas.Message {
	return schemas.Message{Role: schemas.RoleSystem, Content: schemas.Text(s)}
}

func assistant(s string) schemas.Message {
	return schemas.Message{Role: schemas.RoleAssistant, Content: schemas.Text(s)}
}

func call(id, name string) schemas.Message {
	return schemas.Message{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{
		{ID: id, Type: "function", Function: schemas.FunctionCall{Name: name, Arguments: `{}`}}}}
}

func tool(id, s string) schemas.Message {
	return schemas.Message{Role: schemas.RoleTool, ToolCallID: id, Content: schemas.Text(s), Tokens: tokens.Text(s) + 4}
}

// text returns n characters: a recognizable head, a filler, and a recognizable tail.
func text(n int) string {
	if n < 20 {
		return strings.Repeat("x", n)
	}
	return "HEAD-" + strings.Repeat("é", n-10) + "-TAIL"
}

func encode(t *testing.T, msgs []schemas.Message) []byte {
	t.Helper()
	var b bytes.Buffer
	for i := range msgs {
		e, err := msgs[i].Encode()
		if err != nil {
			t.Fatal(err)
		}
		b.Write(e)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

func marker(cut int) string {
	return fmt.Sprintf("[… %d characters cut by Compactor: %s …]", cut, pretrim.Note)
}

func TestToolOutputs(t *testing.T) {
	big := text(10_000)
	tests := []struct {
		name string
		give []schemas.Message
		cap  int
		// want is the text of each message after the call.
		want []string
	}{
		{
			name: "small input is kept whole",
			give: []schemas.Message{system("sys"), user("hi"), call("c1", "ls"), tool("c1", "a b c"), assistant("done")},
			cap:  100,
			want: []string{"sys", "hi", "", "a b c", "done"},
		},
		{
			name: "tool output at the cap is kept whole",
			give: []schemas.Message{call("c1", "ls"), tool("c1", text(400))},
			cap:  100,
			want: []string{"", text(400)},
		},
		{
			name: "tool output over the cap keeps head and tail",
			give: []schemas.Message{call("c1", "cat"), tool("c1", big)},
			cap:  100,
			want: []string{"", "HEAD-" + strings.Repeat("é", 195) + "\n" + marker(9600) + "\n" + strings.Repeat("é", 195) + "-TAIL"},
		},
		{
			name: "user, system and assistant messages are never cut",
			give: []schemas.Message{system(big), user(big), assistant(big)},
			cap:  10,
			want: []string{big, big, big},
		},
		{
			name: "no cap",
			give: []schemas.Message{call("c1", "cat"), tool("c1", big)},
			cap:  0,
			want: []string{"", big},
		},
		{
			name: "negative cap",
			give: []schemas.Message{call("c1", "cat"), tool("c1", big)},
			cap:  -5,
			want: []string{"", big},
		},
		{
			name: "nil input",
			give: nil,
			cap:  10,
			want: nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := encode(t, tt.give)
			got := pretrim.ToolOutputs(tt.give, tt.cap)
			if after := encode(t, tt.give); !bytes.Equal(before, after) {
				t.Fatalf("input changed:\n%s\nwant\n%s", after, before)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d messages; want %d", len(got), len(tt.want))
			}
			for i := range got {
				if s := got[i].Content.String(); s != tt.want[i] {
					t.Errorf("message %d: got %q; want %q", i, s, tt.want[i])
				}
				if got[i].Role != tt.give[i].Role {
					t.Errorf("message %d: got role %s; want %s", i, got[i].Role, tt.give[i].Role)
				}
			}
		})
	}
}

func TestToolOutputsResetsProducerCount(t *testing.T) {
	msgs := []schemas.Message{call("c1", "cat"), tool("c1", text(10_000))}
	got := pretrim.ToolOutputs(msgs, 100)
	if got[1].Tokens != 0 {
		t.Errorf("got tokens %d on a cut message; want 0 (the producer's count no longer applies)", got[1].Tokens)
	}
	if got[1].ToolCallID != "c1" {
		t.Errorf("got tool_call_id %q; want c1", got[1].ToolCallID)
	}
	if est := tokens.Message(&got[1]); est > 100+40 {
		t.Errorf("got %d tokens after the cut; want about 100", est)
	}
}

func TestToolOutputsKeepsNonTextParts(t *testing.T) {
	textPart, _ := json.Marshal(map[string]string{"type": "text", "text": text(2000)})
	image := json.RawMessage(`{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}`)
	msgs := []schemas.Message{call("c1", "shot"), {Role: schemas.RoleTool, ToolCallID: "c1", Content: schemas.Parts(textPart, image)}}
	got := pretrim.ToolOutputs(msgs, 50)
	parts, err := got[1].Content.Parts()
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) != 2 || parts[0].Type != "text" || !bytes.Equal(parts[1].Raw, image) {
		t.Fatalf("got parts %s; want a cut text part and the image verbatim", got[1].Content.Raw())
	}
	if !strings.Contains(parts[0].Text, marker(1800)) {
		t.Errorf("got text %q; want the marker %q", parts[0].Text, marker(1800))
	}
}

func TestTotalBudget(t *testing.T) {
	tests := []struct {
		name   string
		give   []schemas.Message
		budget int
		// wantLen is the number of characters of each message's text after the call.
		wantLen []int
		// wantWhole lists the messages that must come back unchanged.
		wantWhole []int
	}{
		{
			name:      "outputs within the budget are kept whole",
			give:      []schemas.Message{call("a", "f"), tool("a", text(1000)), call("b", "f"), tool("b", text(1000))},
			budget:    500,
			wantWhole: []int{0, 1, 2, 3},
		},
		{
			name:      "newest output whole, older one cut to what is left",
			give:      []schemas.Message{call("a", "f"), tool("a", text(8000)), call("b", "f"), tool("b", text(2000))},
			budget:    1000,
			wantWhole: []int{0, 2, 3},
			// 1000 - 500 tokens left = 2000 characters, less room for the marker.
			wantLen: []int{0, 1904 + utf8.RuneCountInString("\n"+marker(6096)+"\n"), 0, 2000},
		},
		{
			name:      "older outputs are cut down to the minimum",
			give:      []schemas.Message{call("a", "f"), tool("a", text(8000)), call("b", "f"), tool("b", text(8000))},
			budget:    100,
			wantWhole: []int{0, 2},
			wantLen: []int{0, 2*pretrim.MinKeep + utf8.RuneCountInString("\n"+marker(7600)+"\n"),
				0, 2*pretrim.MinKeep + utf8.RuneCountInString("\n"+marker(7600)+"\n")},
		},
		{
			name:      "short outputs are never cut",
			give:      []schemas.Message{call("a", "f"), tool("a", text(300)), call("b", "f"), tool("b", text(2*pretrim.MinKeep))},
			budget:    10,
			wantWhole: []int{0, 1, 2, 3},
		},
		{
			name: "user, system and assistant messages are never cut",
			give: []schemas.Message{system(text(9000)), user(text(9000)), assistant(text(9000)),
				call("a", "f"), tool("a", text(9000))},
			budget:    10,
			wantWhole: []int{0, 1, 2, 3},
		},
		{
			name:      "no budget",
			give:      []schemas.Message{call("a", "f"), tool("a", text(9000))},
			budget:    0,
			wantWhole: []int{0, 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := encode(t, tt.give)
			got := pretrim.TotalBudget(tt.give, tt.budget)
			if after := encode(t, tt.give); !bytes.Equal(before, after) {
				t.Fatal("input changed")
			}
			if len(got) != len(tt.give) {
				t.Fatalf("got %d messages; want %d", len(got), len(tt.give))
			}
			for _, i := range tt.wantWhole {
				if a, b := encode(t, got[i:i+1]), encode(t, tt.give[i:i+1]); !bytes.Equal(a, b) {
					t.Errorf("message %d: got %s; want it unchanged", i, a)
				}
			}
			for i, n := range tt.wantLen {
				if n == 0 {
					continue
				}
				s := got[i].Content.String()
				if l := utf8.RuneCountInString(s); l != n {
					t.Errorf("message %d: got %d characters; want %d", i, l, n)
				}
				if !strings.HasPrefix(s, "HEAD-") || !strings.HasSuffix(s, "-TAIL") {
					t.Errorf("message %d: head or tail lost: %.40q…", i, s)
				}
			}
		})
	}
}

func TestTotalBudgetHoldsWhenFeasible(t *testing.T) {
	var msgs []schemas.Message
	for i := range 20 {
		id := fmt.Sprint("c", i)
		msgs = append(msgs, user("step"), call(id, "read"), tool(id, text(1000+i*700)))
	}
	for _, budget := range []int{3000, 5000, 10000, 20000} {
		got := pretrim.TotalBudget(msgs, budget)
		sum := 0
		for i := range got {
			if got[i].Role == schemas.RoleTool {
				sum += tokens.Text(got[i].Content.String())
			}
		}
		if sum > budget {
			t.Errorf("budget %d: tool outputs use %d tokens", budget, sum)
		}
	}
}

func TestDeterministic(t *testing.T) {
	build := func() []schemas.Message {
		var msgs []schemas.Message
		for i := range 10 {
			id := fmt.Sprint("c", i)
			msgs = append(msgs, user(text(50*i)), call(id, "read"), tool(id, text(900*i)))
		}
		return msgs
	}
	a := pretrim.TotalBudget(pretrim.ToolOutputs(build(), 1000), 3000)
	b := pretrim.TotalBudget(pretrim.ToolOutputs(build(), 1000), 3000)
	if !bytes.Equal(encode(t, a), encode(t, b)) {
		t.Error("same input gave different output")
	}
}

func ExampleToolOutputs() {
	log := "$ go test ./...\n" + strings.Repeat("=== RUN TestSomething\n", 50) + "FAIL example"
	msgs := []schemas.Message{
		{Role: schemas.RoleUser, Content: schemas.Text("run the tests")},
		{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{
			{ID: "c1", Type: "function", Function: schemas.FunctionCall{Name: "sh", Arguments: `{"cmd":"go test ./..."}`}}}},
		{Role: schemas.RoleTool, ToolCallID: "c1", Content: schemas.Text(log)},
	}
	out := pretrim.ToolOutputs(msgs, 6) // 6 tokens: 12 characters of head, 12 of tail
	fmt.Println(out[0].Content.String())
	fmt.Println(out[2].Content.String())
	// Output:
	// run the tests
	// $ go test ./
	// [… 1104 characters cut by Compactor: tool output pre-trimmed before summarizing …]
	// FAIL example
}
