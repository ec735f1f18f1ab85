package jetstream_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
)

func TestConversationRoot(t *testing.T) {
	tests := []struct {
		name, give, want string
	}{
		{"no branch", "c1", "c1"},
		{"a branch", "c1--0123456789abcdef", "c1"},
		{"a branch of a branch", "c1--0123456789abcdef--fedcba9876543210", "c1"},
		{"two dashes, no digest", "proj--billing", "proj--billing"},
		{"upper-case digits are no digest", "c1--0123456789ABCDEF", "c1--0123456789ABCDEF"},
		{"a digest too short", "c1--0123456789abcde", "c1--0123456789abcde"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := jetstream.ConversationRoot(tt.give); got != tt.want {
				t.Fatalf("ConversationRoot(%q) = %q; want %q", tt.give, got, tt.want)
			}
		})
	}
}

// What the tenant gauge and compactor tenants read (ChatState) counts a conversation
// and its proxy branches as one, as the conversations quota does: three subjects of c1
// and its branches, and one of c2, are two conversations.
func TestChatStateCountsBranchesWithTheirConversation(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, conv := range []string{"c1", "c1--0123456789abcdef", "c1--0123456789abcdef--fedcba9876543210", "c2", "proj--billing"} {
		if _, err := st.Chat().Publish(ctx, conv, []byte(`{"role":"user","content":"hi"}`), ""); err != nil {
			t.Fatal(err)
		}
	}
	f, err := st.ChatState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if f.Conversations != 3 {
		t.Fatalf("ChatState counts %d conversations; want 3 (c1 with its branches, c2, proj--billing)", f.Conversations)
	}
}

// Past jetstream.BranchesPerConversation, each branch counts as a conversation of its
// own, and its root is named crowded: 34 branches of c1 are c1 and two more.
func TestChatRootsCountsBranchesPastTheBound(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	convs := []string{"c2"}
	for i := range jetstream.BranchesPerConversation + 2 {
		convs = append(convs, fmt.Sprintf("c1--%016x", i))
	}
	for _, conv := range convs {
		if _, err := st.Chat().Publish(ctx, conv, []byte(`{"role":"user","content":"hi"}`), ""); err != nil {
			t.Fatal(err)
		}
	}
	cc, err := st.ChatRoots(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cc.Conversations != 4 || !cc.Crowded["c1"] || len(cc.Crowded) != 1 {
		t.Fatalf("ChatRoots: %d conversations, crowded %v; want 4 (c1 with %d branches, 2 more, c2), c1 crowded",
			cc.Conversations, cc.Crowded, jetstream.BranchesPerConversation)
	}
}
