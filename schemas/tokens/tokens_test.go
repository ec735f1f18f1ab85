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

func TestText(t *testing.T) {
	tests := []struct {
		name string
		give string
		want int
	}{
		{name: "empty", give: "", want: 0},
		{name: "one", give: "a", want: 1},
		{name: "four", give: "abcd", want: 1},
		{name: "five", give: "abcde", want: 2},
		{name: "eight", give: "abcdefgh", want: 2},
		{name: "code points not bytes", give: "ééééé", want: 2},
		{name: "emoji", give: "😀😀😀😀", want: 1},
		{name: "long", give: strings.Repeat("x", 4001), want: 1001},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tokens.Text(tt.give); got != tt.want {
				t.Fatalf("Text(%q) got %d; want %d", tt.give, got, tt.want)
			}
		})
	}
}

func TestEstimateAndMessage(t *testing.T) {
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
			give:         schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("12345678")},
			wantEstimate: tokens.PerMessage + 2, wantMessage: tokens.PerMessage + 2,
		},
		{
			name: "name and reasoning",
			give: schemas.Message{Role: schemas.RoleAssistant, Content: schemas.Text("abcd"), Name: "bob", Reasoning: "hmmmm"},
			// 4 + name 1 + reasoning 2 + content 1
			wantEstimate: tokens.PerMessage + 1 + 2 + 1, wantMessage: tokens.PerMessage + 4,
		},
		{
			name: "parts: text by characters, others fixed",
			give: schemas.Message{Role: schemas.RoleUser, Content: schemas.Parts(
				json.RawMessage(`{"type":"text","text":"abcdefgh"}`),
				json.RawMessage(`{"type":"image_url","image_url":{"url":"https://x/very/long/url/that/does/not/count"}}`),
				json.RawMessage(`{"type":"input_audio","input_audio":{"data":"AAAA","format":"wav"}}`),
			)},
			wantEstimate: tokens.PerMessage + 2 + 2*tokens.PerNonTextPart,
			wantMessage:  tokens.PerMessage + 2 + 2*tokens.PerNonTextPart,
		},
		{
			name:         "broken parts count nothing",
			give:         schemas.Message{Role: schemas.RoleUser, Content: schemas.RawContent(json.RawMessage(`[1,2]`))},
			wantEstimate: tokens.PerMessage, wantMessage: tokens.PerMessage,
		},
		{
			name: "tool calls",
			give: schemas.Message{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{
				{ID: "a", Type: "function", Function: schemas.FunctionCall{Name: "ls", Arguments: `{"path":"/"}`}},
				{ID: "b", Type: "function", Function: schemas.FunctionCall{Name: "read_file", Arguments: ""}},
			}},
			// ls 1 + 12 chars 3; read_file 3 + 0
			wantEstimate: tokens.PerMessage + 2*tokens.PerToolCall + 1 + 3 + 3,
			wantMessage:  tokens.PerMessage + 2*tokens.PerToolCall + 1 + 3 + 3,
		},
		{
			name:         "producer count wins over the estimate above the floor",
			give:         schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(strings.Repeat("x", 400)), Tokens: 60},
			wantEstimate: tokens.PerMessage + 100, wantMessage: 60,
		},
		{
			name:         "producer count far below the content is held to the floor",
			give:         schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(strings.Repeat("x", 400)), Tokens: 7},
			wantEstimate: tokens.PerMessage + 100, wantMessage: 50,
		},
		{
			name:         "zero producer count is no count",
			give:         schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("abc"), Tokens: 0},
			wantEstimate: tokens.PerMessage + 1, wantMessage: tokens.PerMessage + 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tokens.Estimate(&tt.give); got != tt.wantEstimate {
				t.Errorf("Estimate got %d; want %d", got, tt.wantEstimate)
			}
			if got := tokens.Message(&tt.give); got != tt.wantMessage {
				t.Errorf("Message got %d; want %d", got, tt.wantMessage)
			}
		})
	}
}

func TestMessagesAndEntries(t *testing.T) {
	a := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("abcd")} // 5
	b := schemas.Message{Role: schemas.RoleUser, Tokens: 10}                    // 10
	tests := []struct {
		name        string
		give        []schemas.Entry
		wantEntries int
	}{
		{name: "none", give: nil, wantEntries: 0},
		{name: "two", give: []schemas.Entry{{Seq: 1, Message: a}, {Seq: 2, Message: b}}, wantEntries: 15},
		{name: "invalid counts nothing", give: []schemas.Entry{{Seq: 1, Message: a}, {Seq: 2, Message: b, Err: errors.New("bad")}}, wantEntries: 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tokens.Entries(tt.give); got != tt.wantEntries {
				t.Errorf("Entries got %d; want %d", got, tt.wantEntries)
			}
			var ms []schemas.Message
			want := 0
			for _, e := range tt.give {
				ms = append(ms, e.Message)
				want += tokens.Message(&e.Message)
			}
			if got := tokens.Messages(ms); got != want {
				t.Errorf("Messages got %d; want %d", got, want)
			}
		})
	}
}

func ExampleText() {
	fmt.Println(tokens.Text("Hello, world!")) // 13 characters
	fmt.Println(tokens.Text("héllo"))         // characters, not bytes
	// Output:
	// 4
	// 2
}

func TestLookup(t *testing.T) {
	exact := func(name string) (tokens.Counter, error) { return words{}, nil }
	for _, tc := range []struct {
		name    string
		exact   func(string) (tokens.Counter, error)
		wantErr bool
	}{
		{"", nil, false},
		{"chars4", nil, false},
		{"o200k_base", nil, true},
		{"o200k_base", exact, false},
	} {
		c, err := tokens.Lookup(tc.name, tc.exact)
		if (err != nil) != tc.wantErr || (err == nil && c == nil) {
			t.Errorf("Lookup(%q) = %v, %v", tc.name, c, err)
		}
		if tc.wantErr && !errors.Is(err, tokens.ErrTokenizerUnavailable) {
			t.Errorf("Lookup(%q) error %v; want ErrTokenizerUnavailable", tc.name, err)
		}
	}
}

// A stub whose reference carries Stored of the message it replaces counts as that
// message does: the trigger weighs a large message without fetching its object.
func TestStubCountsAsTheMessageItReplaces(t *testing.T) {
	for _, give := range []string{
		`{"role":"tool","content":"` + strings.Repeat("output ", 5000) + `","tool_call_id":"c1"}`,
		`{"role":"assistant","content":[{"type":"text","text":"abc"},{"type":"image_url","image_url":{"url":"u"}}],"reasoning":"because","name":"n","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]}`,
	} {
		m, err := schemas.DecodeMessage([]byte(give))
		if err != nil {
			t.Fatal(err)
		}
		stub, _, err := m.Offload("c", "b", tokens.Stored(&m))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := tokens.Message(&stub), tokens.Message(&m); got != want {
			t.Errorf("stub counts %d tokens; the message it replaces %d", got, want)
		}
		if tokens.Message(&stub) <= tokens.Estimate(&schemas.Message{Role: m.Role, Content: stub.Content}) {
			t.Errorf("stub counted as its placeholder text")
		}
	}
}

// A declared count is held to a floor of a token per 8 UTF-8 bytes of text: the issue's
// 900 KB tool output marked `tokens: 1` weighs about 115,000 tokens, not 1. A stub
// counts its object's size in place of the content it left out, whatever its
// reference's tokens say.
func TestDeclaredCountsAreHeldToTheContent(t *testing.T) {
	big := strings.Repeat("log line 0123456789 abcdefghijklmnopqrstuvwxyz\n", 900_000/48)
	ref := func(size int64, toks int) *schemas.ContentRef {
		return &schemas.ContentRef{Bucket: "b", Name: "c/x", Size: size, Tokens: toks}
	}
	tests := []struct {
		name      string
		give      schemas.Message
		wantFloor int
		wantMsg   int
	}{
		{
			name:      "900 KB tool output marked tokens 1",
			give:      schemas.Message{Role: schemas.RoleTool, ToolCallID: "c", Content: schemas.Text(big), Tokens: 1},
			wantFloor: (len(big) + 7) / 8, wantMsg: (len(big) + 7) / 8,
		},
		{
			name:      "bytes, not characters: é is two bytes",
			give:      schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(strings.Repeat("é", 40)), Tokens: 1},
			wantFloor: 10, wantMsg: 10,
		},
		{
			name: "text parts, reasoning, name and tool calls; a media payload nothing",
			give: schemas.Message{Role: schemas.RoleAssistant, Name: "bob", Reasoning: "12345678", Tokens: 2,
				Content: schemas.Parts(json.RawMessage(`{"type":"text","text":"abcdefgh"}`),
					json.RawMessage(`{"type":"image_url","image_url":{"url":"https://x/a/very/long/url/that/does/not/count"}}`)),
				ToolCalls: []schemas.ToolCall{{ID: "a", Type: "function", Function: schemas.FunctionCall{Name: "ls", Arguments: `{"p":1}`}}}},
			// bytes: name 3 + ls 2 + args 7 + reasoning 8 + text 8 = 28, and the image's
			// fields beside its url: "image_url" 9 + {"url":…} 55 - the url's 47 = 17 → 6
			wantFloor: 6, wantMsg: 6,
		},
		{
			name:      "an honest count above the floor stands",
			give:      schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(strings.Repeat("x", 80)), Tokens: 15},
			wantFloor: 10, wantMsg: 15,
		},
		{
			name:      "stub marked tokens 1 with a reference of 1 token",
			give:      schemas.Message{Role: schemas.RoleTool, ToolCallID: "c", Content: schemas.Text("[stored]"), Tokens: 1, ContentRef: ref(900_000, 1)},
			wantFloor: 112_500, wantMsg: 112_500, // the placeholder text is not counted: the object is
		},
		{
			name:      "hostile size is bounded",
			give:      schemas.Message{Role: schemas.RoleTool, ToolCallID: "c", Tokens: 1, ContentRef: ref(1<<62, 1)},
			wantFloor: 1 << 40 / 8, wantMsg: 1 << 40 / 8,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tokens.Floor(&tt.give); got != tt.wantFloor {
				t.Errorf("Floor got %d; want %d", got, tt.wantFloor)
			}
			if got := tokens.Message(&tt.give); got != tt.wantMsg {
				t.Errorf("Message got %d; want %d", got, tt.wantMsg)
			}
			if got := tokens.Message(&tt.give); got < tokens.Floor(&tt.give) {
				t.Errorf("Message %d is below the floor %d", got, tokens.Floor(&tt.give))
			}
		})
	}
}

// A stub without a declared count is estimated from its reference's tokens, held to a
// token per 8 bytes of its object: a reference that says 1 for 900 KB is not believed,
// one that says more than the floor is.
func TestStubEstimateIsHeldToItsObjectSize(t *testing.T) {
	stub := func(size int64, toks int) schemas.Message {
		return schemas.Message{Role: schemas.RoleTool, ToolCallID: "c",
			ContentRef: &schemas.ContentRef{Bucket: "b", Name: "c/x", Size: size, Tokens: toks}}
	}
	for _, tt := range []struct {
		give schemas.Message
		want int
	}{
		{stub(900_000, 1), tokens.PerMessage + 112_500},
		{stub(800, 300), tokens.PerMessage + 300},
	} {
		if got := tokens.Estimate(&tt.give); got != tt.want {
			t.Errorf("Estimate of a stub of %d bytes and %d tokens got %d; want %d", tt.give.ContentRef.Size, tt.give.ContentRef.Tokens, got, tt.want)
		}
	}
}

// The shortcut that skips decoding a content whose declared count is above any floor
// its raw bytes allow gives what the floor gives, for escaped strings and parts too.
func TestDeclaredCountShortcutAgreesWithTheFloor(t *testing.T) {
	for _, raw := range []string{`"plain text of some length"`, `"\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\n\n\"q\""`,
		`[{"type":"text","text":"\u00e9t\u00e9 \ud83d\ude00"},{"type":"image_url","image_url":{"url":"data:x"}}]`, `null`} {
		for declared := 1; declared <= 12; declared++ {
			m := schemas.Message{Role: schemas.RoleUser, Content: schemas.RawContent(json.RawMessage(raw)), Reasoning: "why", Tokens: declared}
			if got, want := tokens.Message(&m), max(declared, tokens.Floor(&m)); got != want {
				t.Errorf("%s declared %d: Message %d; want %d", raw, declared, got, want)
			}
		}
	}
}

// A part of another type than text carries text a model is sent (a refusal's words, a
// field of a type Compactor does not know): it counts, declared or not, and a declared
// count is held to it. Media parts weigh their fixed cost whatever their encoded size.
func TestNonTextPartsCannotHideText(t *testing.T) {
	big := strings.Repeat("word ", 180_000) // 900 KB
	for _, typ := range []string{"refusal", "made_up"} {
		field := typ
		if typ == "made_up" {
			field = "payload"
		}
		part, err := json.Marshal(map[string]any{"type": typ, field: map[string]string{"nested": big}})
		if typ == "refusal" {
			part, err = json.Marshal(map[string]string{"type": typ, field: big})
		}
		if err != nil {
			t.Fatal(err)
		}
		m := schemas.Message{Role: schemas.RoleAssistant, Content: schemas.Parts(part)}
		if got, want := tokens.Message(&m), len(big)/4; got < want {
			t.Errorf("%s part of %d bytes, no declared count: %d tokens; want at least %d", typ, len(big), got, want)
		}
		m.Tokens = 1
		if got, want := tokens.Message(&m), len(big)/tokens.FloorBytesPerToken; got < want {
			t.Errorf("%s part of %d bytes declared 1 token: %d tokens; want at least %d", typ, len(big), got, want)
		}
	}
	image, err := json.Marshal(map[string]any{"type": "image_url", "image_url": map[string]string{"url": "data:image/png;base64," + strings.Repeat("A", 400_000)}})
	if err != nil {
		t.Fatal(err)
	}
	m := schemas.Message{Role: schemas.RoleUser, Content: schemas.Parts(image)}
	if got := tokens.Message(&m); got > tokens.PerMessage+tokens.PerNonTextPart {
		t.Errorf("an image of 400 KB encoded: %d tokens; want its fixed cost %d", got, tokens.PerMessage+tokens.PerNonTextPart)
	}
}
