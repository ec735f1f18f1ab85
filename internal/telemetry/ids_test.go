package telemetry_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/compactor/compactor/internal/telemetry"
)

const rawID = "ticket-4711"

// With the hasher, a log line holds no raw conversation id (its conversation field, an
// error quoting it, a subject naming it) but the same keyed hash each time, which
// another id does not share and another key does not give; ids that are only part of
// a longer word stay as they are.
func TestLogLinesHoldAHashOfTheConversationID(t *testing.T) {
	h := telemetry.NewIDHasher([]byte("deployment-key-0123456789"))
	for _, console := range []bool{false, true} {
		var buf bytes.Buffer
		var w = zerolog.ConsoleWriter{Out: &buf, NoColor: true}
		log := zerolog.New(h.Writer(&buf))
		if console {
			log = zerolog.New(h.Writer(w))
		}
		log.Error().Str("conversation", rawID).Err(errors.New("read the tombstone of "+rawID+": timeout")).
			Str("other", "xticket-4711x").Msg("cannot tell")
		log.Warn().Str("subject", "chat."+rawID+".msg").Msg("no conversation field")
		out := buf.String()
		if strings.Contains(strings.ReplaceAll(out, "xticket-4711x", ""), rawID) {
			t.Fatalf("console %v: the log holds the raw id:\n%s", console, out)
		}
		if n := strings.Count(out, h.Hash(rawID)); n != 3 || !strings.Contains(out, "xticket-4711x") {
			t.Fatalf("console %v: the hash appears %d times (want 3) or a longer word was changed:\n%s", console, n, out)
		}
	}
	if h.Hash(rawID) == h.Hash("ticket-4712") || h.Hash(rawID) == telemetry.NewIDHasher([]byte("another-key-0123456789")).Hash(rawID) {
		t.Fatal("the hash does not depend on the id and the key")
	}
	var plain bytes.Buffer
	(*telemetry.IDHasher)(nil).Writer(&plain).Write([]byte(`{"conversation":"` + rawID + `"}`))
	if !strings.Contains(plain.String(), rawID) {
		t.Fatal("without the setting the log changed")
	}
}

// With the hasher, an exported span holds no raw conversation id: not in its
// compactor.conversation attribute, nor in another attribute, its status or an event.
func TestSpansHoldAHashOfTheConversationID(t *testing.T) {
	h := telemetry.NewIDHasher([]byte("deployment-key-0123456789"))
	mem := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(h.Exporter(mem)))
	_, span := tp.Tracer("test").Start(context.Background(), "compactor.compact")
	span.SetAttributes(attribute.String(telemetry.ConversationAttribute, rawID), attribute.String("messaging.destination", "compact.request."+rawID),
		attribute.Int("compactor.generation", 3))
	span.AddEvent("retry of " + rawID)
	span.SetStatus(codes.Error, "write the value of "+rawID)
	span.End() // exported at once (a syncer)
	spans := mem.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans exported", len(spans))
	}
	s := spans[0]
	var all []string
	for _, kv := range s.Attributes {
		all = append(all, string(kv.Key)+"="+kv.Value.String())
		if kv.Key == telemetry.ConversationAttribute && kv.Value.AsString() != h.Hash(rawID) {
			t.Errorf("%s = %q; want %q", kv.Key, kv.Value.AsString(), h.Hash(rawID))
		}
	}
	for _, ev := range s.Events {
		all = append(all, ev.Name)
	}
	all = append(all, s.Name, s.Status.Description)
	if joined := strings.Join(all, " "); strings.Contains(joined, rawID) || !strings.Contains(joined, "compactor.generation=3") {
		t.Fatalf("the exported span: %s", joined)
	}
}
