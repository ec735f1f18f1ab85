package tokens_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/tokens"
)

// words is a Counter that counts whitespace-separated words, so a test can tell which
// texts went through the Counter and which costs are fixed.
type words struct{}

func (words) Count(text string) int { return len(strings.Fields(text)) }

func TestChars4(t *testing.T) {
	tests := []struct {
		name string
		give string
		want int
	}{
		{name: "empty", give: "", want: 0},
		{name: "one", give: "a", want: 1},
		{name: "five", give: "abcde", want: 2},
		{name: "code points not bytes", give: "ééééé", want: 2},
	}
	var c tokens.Counter = tokens.Chars4{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := c.Count(tt.give); got != tt.want {
				t.Fatalf("Chars4.Count(%q) got %d; want %d", tt.give, got, tt.want)
			}
			if got := tokens.Text(tt.give); got != tt.want {
				t.Fatalf("Text(%q) got %d; want %d", tt.give, got, tt.want)
			}
		})
	}
}

func TestEstimateWithAndMessageWith(t *testing.T) {
	tests := []struct {
		name         string
		give         schemas.Message
		wantEstimate int
		wantMessage  int
	}{
		{
			name:         "null content",
			give:         schemas.Message{Role: schemas.RoleUser},
			wantEstimate: tokens.PerMessage, wantMessage: tokens.PerMessage,
		},
		{
			name:         "string content",
			give:         schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("one two three")},
			wantEstimate: tokens.PerMessage + 3, wantMessage: tokens.PerMessage + 3,
		},
		{
			name:         "name and reasoning",
			give:         schemas.Message{Role: schemas.RoleAssistant, Content: schemas.Text("a b"), Name: "bob", Reasoning: "think it over"},
			wantEstimate: tokens.PerMessage + 1 + 3 + 2, wantMessage: tokens.PerMessage + 6,
		},
		{
			name: "parts: text by the counter, others fixed",
			give: schemas.Message{Role: schemas.RoleUser, Content: schemas.Parts(
				json.RawMessage(`{"type":"text","text":"look at this"}`),
				json.RawMessage(`{"type":"image_url","image_url":{"url":"https://x/a b c d e"}}`),
				json.RawMessage(`{"type":"file","file":{"filename":"a b.pdf"}}`),
			)},
			wantEstimate: tokens.PerMessage + 3 + 2*tokens.PerNonTextPart,
			wantMessage:  tokens.PerMessage + 3 + 2*tokens.PerNonTextPart,
		},
		{
			name:         "broken parts count nothing",
			give:         schemas.Message{Role: schemas.RoleUser, Content: schemas.RawContent(json.RawMessage(`[1,2]`))},
			wantEstimate: tokens.PerMessage, wantMessage: tokens.PerMessage,
		},
		{
			name: "tool calls: fixed cost plus name and arguments",
			give: schemas.Message{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{
				{ID: "a", Type: "function", Function: schemas.FunctionCall{Name: "ls", Arguments: `{"path": "/"}`}},
				{ID: "b", Type: "function", Function: schemas.FunctionCall{Name: "read_file", Arguments: ""}},
			}},
			wantEstimate: tokens.PerMessage + 2*tokens.PerToolCall + 1 + 2 + 1,
			wantMessage:  tokens.PerMessage + 2*tokens.PerToolCall + 1 + 2 + 1,
		},
		{
			name:         "producer count wins",
			give:         schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("a b c"), Tokens: 7},
			wantEstimate: tokens.PerMessage + 3, wantMessage: 7,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tokens.EstimateWith(words{}, &tt.give); got != tt.wantEstimate {
				t.Errorf("EstimateWith got %d; want %d", got, tt.wantEstimate)
			}
			if got := tokens.MessageWith(words{}, &tt.give); got != tt.wantMessage {
				t.Errorf("MessageWith got %d; want %d", got, tt.wantMessage)
			}
		})
	}
}

func TestNilCounterIsChars4(t *testing.T) {
	tests := []struct {
		name string
		give schemas.Message
	}{
		{name: "null content", give: schemas.Message{Role: schemas.RoleUser}},
		{name: "string content", give: schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("héllo, world")}},
		{name: "everything", give: schemas.Message{
			Role: schemas.RoleAssistant, Name: "bob", Reasoning: "hmmmm",
			Content: schemas.Parts(
				json.RawMessage(`{"type":"text","text":"abcdefgh"}`),
				json.RawMessage(`{"type":"image_url","image_url":{"url":"https://x/y.png"}}`),
			),
			ToolCalls: []schemas.ToolCall{{ID: "a", Type: "function", Function: schemas.FunctionCall{Name: "ls", Arguments: `{}`}}},
		}},
		{name: "producer count", give: schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("abc"), Tokens: 9}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, want := tokens.EstimateWith(nil, &tt.give), tokens.Estimate(&tt.give); got != want {
				t.Errorf("EstimateWith(nil) got %d; want Estimate %d", got, want)
			}
			if got, want := tokens.EstimateWith(tokens.Chars4{}, &tt.give), tokens.Estimate(&tt.give); got != want {
				t.Errorf("EstimateWith(Chars4) got %d; want Estimate %d", got, want)
			}
			if got, want := tokens.MessageWith(nil, &tt.give), tokens.Message(&tt.give); got != want {
				t.Errorf("MessageWith(nil) got %d; want Message %d", got, want)
			}
		})
	}
}

func TestMessagesWithAndEntriesWith(t *testing.T) {
	a := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("one two")} // 4 + 2 words
	b := schemas.Message{Role: schemas.RoleUser, Tokens: 10}                       // 10
	tests := []struct {
		name        string
		give        []schemas.Entry
		wantEntries int
		wantChars4  int
	}{
		{name: "none", give: nil, wantEntries: 0, wantChars4: 0},
		{name: "two", give: []schemas.Entry{{Seq: 1, Message: a}, {Seq: 2, Message: b}}, wantEntries: 16, wantChars4: 16},
		{name: "invalid counts nothing", give: []schemas.Entry{{Seq: 1, Message: a}, {Seq: 2, Message: b, Err: errors.New("bad")}}, wantEntries: 6, wantChars4: 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tokens.EntriesWith(words{}, tt.give); got != tt.wantEntries {
				t.Errorf("EntriesWith got %d; want %d", got, tt.wantEntries)
			}
			if got, want := tokens.EntriesWith(nil, tt.give), tokens.Entries(tt.give); got != want || got != tt.wantChars4 {
				t.Errorf("EntriesWith(nil) got %d; want Entries %d and %d", got, want, tt.wantChars4)
			}
			var ms []schemas.Message
			want := 0
			for _, e := range tt.give {
				ms = append(ms, e.Message)
				want += tokens.MessageWith(words{}, &e.Message)
			}
			if got := tokens.MessagesWith(words{}, ms); got != want {
				t.Errorf("MessagesWith got %d; want %d", got, want)
			}
			if got, want := tokens.MessagesWith(nil, ms), tokens.Messages(ms); got != want {
				t.Errorf("MessagesWith(nil) got %d; want Messages %d", got, want)
			}
		})
	}
}

func ExampleEstimateWith() {
	m := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("Hello, world!")}
	fmt.Println(tokens.EstimateWith(tokens.Chars4{}, &m)) // 4 per message + 13 characters / 4
	fmt.Println(tokens.EstimateWith(nil, &m) == tokens.Estimate(&m))
	// Output:
	// 8
	// true
}
