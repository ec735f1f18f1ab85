package summarizer_test

import (
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/summarizer"
)

// A worker that crashed between writing its value and checking the tombstone left the
// value (written after the tombstone, built on the forgotten conversation) and its
// request unacknowledged (the worker acknowledges only after the check; here the
// request is still there to be delivered again, as when the forget's purge of the work
// queue came before the request was queued again). Its next delivery is dropped as made
// before the forget, and removes the value. (When the forget deleted the request, the
// trigger, the next job and every reader are the backstops: see the tests of a late
// value in triggers, pipeline, pipeline/service, pipeline/view and the clients.)
func TestRedeliveryAfterACrashBetweenWriteAndCheckRemovesTheValue(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx := ctxFor(t)
	last := needles(t, st, "crash", "c", 10)
	req := request(t, ctx, st, "crash", last) // the crashed worker's request, not acknowledged
	out, err := st.Forget(ctx, "crash")
	if err != nil {
		t.Fatal(err)
	}
	// Forget purges the pending request; the crashed worker's is delivered again.
	req2 := request(t, ctx, st, "crash", req.UpToSeq)
	left := &schemas.Result{SchemaVersion: 1, Conversation: "crash", Generation: 1, Summary: "Facts: NEEDLE-c00",
		TailStartSeq: last, CoveredThroughSeq: last - 1, FirstSeq: 1, RequestID: req2.RequestID, CreatedAt: time.Now()}
	if _, err := st.Results().Put(ctx, left, 0); err != nil {
		t.Fatal(err)
	}
	sum := newHeld()
	close(sum.release)
	stop := startPool(t, st, sum, nil, 3)
	waitDrained(t, nc, st)
	stop()
	if v, _, err := st.Results().Get(ctx, "crash", true); err != nil || v != nil {
		t.Fatalf("after the redelivery: value %+v, %v; want the value of the forgotten conversation (through %d) removed", v, err, out.ThroughSeq)
	}
	if len(sum.entered) != 0 {
		t.Fatal("a request made before the forget reached the summarizer")
	}
	noTrace(t, nc, "crash", "c")
}

// A job whose tombstone check cannot get an answer for longer than the check used to
// ask (30 s; shortened here) does not give up and leave its value: it asks until the
// forget bucket answers again, then takes the value back. (The bucket's stream, deleted
// here and provisioned again, stands for one without a leader.)
func TestWorkerThatCannotCheckTheTombstoneDoesNotLeaveItsValue(t *testing.T) {
	summarizer.SetForgetCheckWait(t, 300*time.Millisecond)
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx := ctxFor(t)
	last := needles(t, st, "blind", "b", 10)
	request(t, ctx, st, "blind", last)
	sum := newHeld()
	stop := startPool(t, st, sum, nil, 3)
	sum.waitEntered(t)
	out, err := st.Forget(ctx, "blind")
	if err != nil {
		t.Fatal(err)
	}
	js := jsOf(t, nc)
	if err := js.DeleteStream(ctx, "KV_"+st.Config().ForgetBucket); err != nil {
		t.Fatal(err)
	}
	close(sum.release)
	deadline := time.Now().Add(30 * time.Second)
	for {
		v, _, err := st.Results().Get(ctx, "blind", true)
		if err == nil && v != nil {
			break // the job wrote its value; its check cannot answer
		}
		if time.Now().After(deadline) {
			t.Fatal("the job did not write its value")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Longer than one check's wait: a check that gives up has given up by now.
	time.Sleep(3 * 300 * time.Millisecond)
	jstest.Provision(t, nc)
	tombstoneOnly(t, nc, st, "blind", out.ThroughSeq)
	deadline = time.Now().Add(30 * time.Second)
	for {
		v, _, err := st.Results().Get(ctx, "blind", true)
		if err == nil && v == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s after the bucket answered again: value %+v, %v; want the value of the forgotten conversation taken back", v, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	noTrace(t, nc, "blind", "b")
}

// On a 3-node cluster, the forget bucket's stream elects a new leader while a job of
// the conversation being forgotten writes its value and checks the tombstone: the
// check asks until the new leader answers, and takes the value back.
func TestElectionOfTheForgetBucketDuringAForget(t *testing.T) {
	c := jstest.StartCluster(t, 3)
	nc := c.Conn(t)
	ctx := ctxFor(t)
	cfg := jetstream.DefaultConfig()
	cfg.Replicas = 3
	// A stream at 3 replicas may be refused while a peer is still joining ("no suitable
	// peers for placement"): provision retrying, as serve does.
	st, err := jetstream.ProvisionRetrying(ctx, nc, cfg, jetstream.Backoff{Base: 100 * time.Millisecond, Max: time.Second}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	last := needles(t, st, "elect", "e", 10)
	request(t, ctx, st, "elect", last)
	sum := newHeld()
	stop := startPool(t, st, sum, nil, 3)
	sum.waitEntered(t)
	if _, err := st.Forget(ctx, "elect"); err != nil {
		t.Fatal(err)
	}
	// Leader elections one after the other while the job writes and checks, until the
	// pool has drained (the job settled).
	flapping := make(chan struct{})
	flapped := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-flapping:
				flapped <- n
				return
			default:
			}
			if _, err := nc.Request("$JS.API.STREAM.LEADER.STEPDOWN.KV_"+cfg.ForgetBucket, nil, 5*time.Second); err == nil {
				n++
			}
			time.Sleep(100 * time.Millisecond) // between elections, as in a flapping cluster
		}
	}()
	close(sum.release)
	waitDrained(t, nc, st)
	stop()
	close(flapping)
	if n := <-flapped; n == 0 {
		t.Fatal("no election took place during the job")
	}
	if v, _, err := st.Results().Get(ctx, "elect", true); err != nil || v != nil {
		t.Fatalf("after the elections: value %+v, %v; want none", v, err)
	}
	noTrace(t, nc, "elect", "e")
}
