package jetstream_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
)

// A description may list the chunks of its object's earlier copies
// (jetstream.EarlierChunksKey), and descriptions are written by producers: one that
// lists another conversation's chunks as its own earlier copy must not make forget
// delete them. The forget reports it.
func TestForgetTrustsNoEarlierChunks(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx := ctxT(t)
	cfg := st.Config()
	obs, err := testJS(t, nc).ObjectStore(ctx, cfg.ObjectsBucket)
	if err != nil {
		t.Fatal(err)
	}
	victim, err := obs.PutString(ctx, "victim/big", "NEEDLE-victim's large tool output")
	if err != nil {
		t.Fatal(err)
	}
	seedConversation(t, st, obs, "hostile", "NEEDLE-hostile")
	meta := fmt.Sprintf(`{"name":"hostile/earlier","bucket":%q,"nuid":"OWNCHUNKS1","size":33,"chunks":1,"digest":"SHA-256=x","metadata":{%q:%q}}`,
		cfg.ObjectsBucket, jetstream.EarlierChunksKey, victim.NUID)
	if _, err := testJS(t, nc).Publish(ctx, "$O."+cfg.ObjectsBucket+".M."+base64URL("hostile/earlier"), []byte(meta), natsjs.WithMsgID("earlier")); err != nil {
		t.Fatal(err)
	}
	_, err = st.Forget(ctx, "hostile")
	var step *jetstream.ForgetStepError
	if !errors.As(err, &step) || !strings.Contains(err.Error(), "hostile/earlier") || !strings.Contains(err.Error(), victim.NUID) {
		t.Fatalf("forget: %v; want the objects step to report the earlier chunks it did not trust", err)
	}
	if got, err := obs.GetString(ctx, "victim/big"); err != nil || !strings.Contains(got, "NEEDLE-victim") {
		t.Fatalf("the victim's object after the forget: %q, %v; want it whole", got, err)
	}
}
