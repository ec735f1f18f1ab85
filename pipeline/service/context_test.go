package service_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/pipeline/service"
	"github.com/compactor/compactor/schemas"
)

// A context asked for with a format that is far over the max payload as stored is
// answered 413 before it is read whole: no object of its large messages is fetched.
// (Before, the service rendered the whole context, every object fetched, and only then
// measured it.)
func TestServiceContextFormatRefusesALargeContextUnread(t *testing.T) {
	const payload = 16 << 10
	srv := jstest.ServerWith(t, jstest.MaxPayload(payload))
	s := startServiceOn(t, srv.ClientURL(), service.Config{})
	ctx := svcCtx(t)
	c := pipeline.NewWithStore(s.nc, s.st)
	for i := range 3 { // each stored as an object of about 3 max payloads
		m := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(fmt.Sprintf("%d %s", i, strings.Repeat("x", 3*payload)))}
		if _, err := c.Publish(ctx, "huge", m); err != nil {
			t.Fatal(err)
		}
	}
	spy := jstest.ConnTo(t, srv.ClientURL())
	reads, err := spy.SubscribeSync("$JS.API.STREAM.MSG.GET.OBJ_" + jetstream.DefaultNames().ObjectsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	m, err := s.client.Request(schemas.ContextSubject, []byte(`{"conversation":"huge","format":"openai"}`), 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	code, desc := m.Header.Get(micro.ErrorCodeHeader), m.Header.Get(micro.ErrorHeader)
	if code != "413" || !strings.Contains(desc, fmt.Sprintf("over the max payload of %d bytes", payload)) || !strings.Contains(desc, "pipeline.Client.Render") {
		t.Fatalf("got %s %q; want 413 naming the max payload and the client-side rendering", code, desc)
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	if n, _, _ := reads.Pending(); n != 0 {
		t.Fatalf("%d objects read for a context refused as too large; want none", n)
	}
	// Without a format the answer is the pointers, whatever the context's size.
	var cx schemas.ContextResponse
	svcCall(t, s.client, schemas.ContextSubject, `{"conversation":"huge"}`, &cx)
	if cx.LastSeq == 0 || cx.Rendered != nil {
		t.Fatalf("context without a format = %+v", cx)
	}
}
