package jetstream_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
)

// A description may list the chunks of its object's earlier copies
// (jetstream.EarlierChunksKey), and descriptions are written by producers: one that
// lists another conversation's chunks as its own earlier copy must not make forget
// delete them. Forget checks what each listed copy holds against the object's name and
// reports the copy it did not trust.
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
	victimName := largeMessage(t, st, "victim", bytes.Repeat([]byte("NEEDLE-victim's large tool output "), 30))
	victim, err := obs.GetInfo(ctx, victimName)
	if err != nil {
		t.Fatal(err)
	}
	hostileName := largeMessage(t, st, "hostile", bytes.Repeat([]byte("NEEDLE-hostile's own large output "), 30))
	hostile, err := obs.GetInfo(ctx, hostileName)
	if err != nil {
		t.Fatal(err)
	}
	// The hostile producer rewrites its own description to claim the victim's chunks
	// as an earlier copy of its object.
	info := *hostile
	info.Metadata = map[string]string{jetstream.EarlierChunksKey: victim.NUID}
	meta, err := json.Marshal(info)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := testJS(t, nc).Publish(ctx, "$O."+cfg.ObjectsBucket+".M."+base64URL(hostileName), meta); err != nil {
		t.Fatal(err)
	}
	_, err = st.Forget(ctx, "hostile")
	var step *jetstream.ForgetStepError
	if !errors.As(err, &step) || !strings.Contains(err.Error(), hostileName) || !strings.Contains(err.Error(), victim.NUID) {
		t.Fatalf("forget: %v; want the objects step to report the earlier chunks it did not trust", err)
	}
	if got, err := obs.GetString(ctx, victimName); err != nil || !strings.Contains(got, "NEEDLE-victim") {
		t.Fatalf("the victim's object after the forget: %.40q, %v; want it whole", got, err)
	}
	if _, err := obs.GetInfo(ctx, hostileName); err == nil {
		t.Fatal("the hostile conversation's own object survived its forget")
	}
}
