package jstest

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// Found is one stored message that holds one of the needles Scan looks for.
type Found struct {
	Stream  string
	Seq     uint64
	Subject string
	Needle  string
}

func (f Found) String() string {
	return fmt.Sprintf("%s seq %d (%s) holds %q", f.Stream, f.Seq, f.Subject, f.Needle)
}

// Scan reads every message of every stream of nc's account, raw (subject, headers and
// data, as the stream leader stores them), and returns those that hold any of the
// needles. The last token of an object store's metadata subject (the object's name,
// base64-encoded) is decoded and searched too. It also returns how many messages it
// read.
func Scan(t testing.TB, nc *nats.Conn, needles ...string) (found []Found, read int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	names := js.StreamNames(ctx)
	var streams []string
	for n := range names.Name() {
		streams = append(streams, n)
	}
	if err := names.Err(); err != nil {
		t.Fatalf("list streams: %v", err)
	}
	for _, name := range streams {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		state := st.CachedInfo().State
		if state.Msgs == 0 {
			continue
		}
		for seq := state.FirstSeq; seq <= state.LastSeq; seq++ {
			m, err := st.GetMsg(ctx, seq)
			if errors.Is(err, natsjs.ErrMsgNotFound) {
				continue
			}
			if err != nil {
				t.Fatalf("read %s seq %d: %v", name, seq, err)
			}
			read++
			hay := [][]byte{[]byte(m.Subject), m.Data}
			for k, vs := range m.Header {
				hay = append(hay, []byte(k+": "+strings.Join(vs, ",")))
			}
			if strings.HasPrefix(m.Subject, "$O.") {
				tok := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
				if b, err := base64.URLEncoding.DecodeString(tok); err == nil {
					hay = append(hay, b)
				}
			}
			for _, n := range needles {
				for _, h := range hay {
					if bytes.Contains(h, []byte(n)) {
						found = append(found, Found{Stream: name, Seq: seq, Subject: m.Subject, Needle: n})
						break
					}
				}
			}
		}
	}
	return found, read
}
