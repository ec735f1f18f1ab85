package pipeline_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
)

// batchOf makes convs conversations of rounds rounds each (a user message, a call of
// two tools, their two results, an answer), mixed one message of each conversation at
// a time, as many producers' messages reach one publisher.
func batchOf(convs, rounds int, prefix string) []pipeline.BatchMsg {
	per := make([][]schemas.Message, convs)
	for k := range per {
		for r := range rounds {
			a, b := fmt.Sprintf("c%d-%d-a", k, r), fmt.Sprintf("c%d-%d-b", k, r)
			calls := schemas.Message{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{
				{ID: a, Type: "function", Function: schemas.FunctionCall{Name: "read", Arguments: `{"path":"a.go"}`}},
				{ID: b, Type: "function", Function: schemas.FunctionCall{Name: "read", Arguments: `{"path":"b.go"}`}}}}
			per[k] = append(per[k],
				schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(fmt.Sprintf("question %d of %d", r, k))},
				calls,
				schemas.Message{Role: schemas.RoleTool, ToolCallID: b, Content: schemas.Text("package b")},
				schemas.Message{Role: schemas.RoleTool, ToolCallID: a, Content: schemas.Text("package a")},
				schemas.Message{Role: schemas.RoleAssistant, Content: schemas.Text(fmt.Sprintf("answer %d", r))})
		}
	}
	var out []pipeline.BatchMsg
	for i := range per[0] {
		for k := range per {
			out = append(out, pipeline.BatchMsg{Conv: fmt.Sprintf("%s-%d", prefix, k), Message: per[k][i]})
		}
	}
	return out
}

// storedAsBatch checks that every conversation of msgs holds exactly its messages of
// msgs, in their order, at the sequences seqs names.
func storedAsBatch(t *testing.T, st *jetstream.Store, msgs []pipeline.BatchMsg, seqs []uint64) {
	t.Helper()
	want := map[string][]int{}
	for i, bm := range msgs {
		want[bm.Conv] = append(want[bm.Conv], i)
	}
	for conv, idx := range want {
		es, err := st.Chat().LoadEntries(ctxT(t), conv, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(es) != len(idx) {
			t.Fatalf("%s holds %d messages; want %d", conv, len(es), len(idx))
		}
		for j, i := range idx {
			wantData, _ := msgs[i].Message.Encode()
			gotData, _ := es[j].Message.Encode()
			if es[j].Seq != seqs[i] || !bytes.Equal(gotData, wantData) {
				t.Fatalf("%s message %d = seq %d %s; want batch message %d, seq %d %s", conv, j, es[j].Seq, gotData, i, seqs[i], wantData)
			}
		}
	}
}

// A batch of many conversations, mixed, with far more messages than its window keeps
// in flight: every message is stored once, each conversation's in the batch's order,
// and its tool results pass the pairing check through what the batch itself published.
func TestPublishBatchStoresEveryMessageInOrder(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		c := pipeline.NewWithStore(nc, st)
		msgs := batchOf(7, 6, "order")
		seqs, err := c.PublishBatch(ctxT(t), msgs, pipeline.BatchOptions{Window: 9})
		if err != nil {
			t.Fatal(err)
		}
		if len(seqs) != len(msgs) {
			t.Fatalf("%d seqs for %d messages", len(seqs), len(msgs))
		}
		storedAsBatch(t, st, msgs, seqs)
		if seqs, err := c.PublishBatch(ctxT(t), nil, pipeline.BatchOptions{}); err != nil || len(seqs) != 0 {
			t.Fatalf("empty batch = %v, %v; want nothing", seqs, err)
		}
	})
}

// The first message that fails stops the batch and is named by its index and
// conversation; the messages before it are stored, none after it is published.
func TestPublishBatchErrorNamesTheMessage(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		c := pipeline.NewWithStore(nc, st)
		for _, tc := range []struct {
			name string
			bad  schemas.Message
			is   error
		}{
			{"invalid", schemas.Message{Role: "robot", Content: schemas.Text("beep")}, schemas.ErrInvalid},
			{"unpaired", schemas.Message{Role: schemas.RoleTool, ToolCallID: "nobody-called", Content: schemas.Text("x")}, pipeline.ErrToolResultWithoutCall},
		} {
			msgs := batchOf(3, 2, "fail-"+tc.name)
			const at = 11
			msgs[at].Message = tc.bad
			seqs, err := c.PublishBatch(ctxT(t), msgs, pipeline.BatchOptions{Window: 4})
			var be *pipeline.BatchError
			if !errors.As(err, &be) || be.Index != at || be.Conv != msgs[at].Conv || !errors.Is(err, tc.is) {
				t.Fatalf("%s: error %v; want a *BatchError naming message %d of %s, matching %v", tc.name, err, at, msgs[at].Conv, tc.is)
			}
			for i, s := range seqs {
				if (i < at) != (s != 0) {
					t.Fatalf("%s: message %d has seq %d; want every message before %d stored and none from it on", tc.name, i, s, at)
				}
			}
			storedAsBatch(t, st, msgs[:at], seqs[:at])
		}
	})
}

// A batch that failed half way, published again whole with the same MsgIDs once its
// bad message is mended, stores each message once: the messages stored the first time
// keep their sequences, and a third publish stores nothing.
func TestPublishBatchAgainWithMsgIDsStoresEachMessageOnce(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		c := pipeline.NewWithStore(nc, st)
		msgs := batchOf(4, 3, "again")
		for i := range msgs {
			msgs[i].MsgID = fmt.Sprintf("again-%d", i)
		}
		const at = 25
		good := msgs[at].Message
		msgs[at].Message = schemas.Message{Role: schemas.RoleUser}
		first, err := c.PublishBatch(ctxT(t), msgs, pipeline.BatchOptions{Window: 5})
		var be *pipeline.BatchError
		if !errors.As(err, &be) || be.Index != at {
			t.Fatalf("first publish: %v; want message %d refused", err, at)
		}
		msgs[at].Message = good
		second, err := c.PublishBatch(ctxT(t), msgs, pipeline.BatchOptions{Window: 5})
		if err != nil {
			t.Fatal(err)
		}
		for i := range at {
			if second[i] != first[i] {
				t.Fatalf("message %d stored again: seq %d, first %d", i, second[i], first[i])
			}
		}
		third, err := c.PublishBatch(ctxT(t), msgs, pipeline.BatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range msgs {
			if third[i] != second[i] {
				t.Fatalf("message %d stored again: seq %d, before %d", i, third[i], second[i])
			}
		}
		storedAsBatch(t, st, msgs, second)
	})
}

// A message the stream refuses (here: its MsgID names another stored message) stops
// the batch too: with one publish in flight, the message after it is not published.
func TestPublishBatchStopsAtAMessageTheStreamRefuses(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		c := pipeline.NewWithStore(nc, st)
		if _, err := c.Publish(ctxT(t), "elsewhere", schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("first")}, pipeline.MsgID("taken")); err != nil {
			t.Fatal(err)
		}
		var msgs []pipeline.BatchMsg
		for i := range 6 {
			msgs = append(msgs, pipeline.BatchMsg{Conv: "refused", Message: schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(fmt.Sprintf("message %d", i))}})
		}
		const at = 2
		msgs[at].MsgID = "taken"
		seqs, err := c.PublishBatch(ctxT(t), msgs, pipeline.BatchOptions{Window: 1})
		var be *pipeline.BatchError
		if !errors.As(err, &be) || be.Index != at || !errors.Is(err, pipeline.ErrDuplicate) {
			t.Fatalf("error %v; want message %d named, a duplicate", err, at)
		}
		for i, s := range seqs {
			if (i < at) != (s != 0) {
				t.Fatalf("message %d has seq %d; want the messages before %d stored, none from it on", i, s, at)
			}
		}
		storedAsBatch(t, st, msgs[:at], seqs[:at])
	})
}

// A batch whose context is done publishes nothing more and names the message it
// stopped at.
func TestPublishBatchStopsWhenItsContextIsDone(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		c := pipeline.NewWithStore(nc, st)
		ctx, cancel := context.WithCancel(ctxT(t))
		cancel()
		msgs := batchOf(2, 1, "cancelled")
		seqs, err := c.PublishBatch(ctx, msgs, pipeline.BatchOptions{})
		var be *pipeline.BatchError
		if !errors.As(err, &be) || be.Index != 0 || !errors.Is(err, context.Canceled) {
			t.Fatalf("error %v; want message 0 named, context.Canceled", err)
		}
		for i, s := range seqs {
			if s != 0 {
				t.Fatalf("message %d stored at %d", i, s)
			}
		}
		storedAsBatch(t, st, nil, nil)
		if last, err := st.Chat().LastSeq(ctxT(t), msgs[0].Conv); err != nil || last != 0 {
			t.Fatalf("%s holds a message at %d (%v)", msgs[0].Conv, last, err)
		}
	})
}
