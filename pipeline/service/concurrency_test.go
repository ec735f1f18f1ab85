package service_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/compactor/compactor/pipeline/service"
	"github.com/compactor/compactor/schemas"
)

// heldForgets makes the forgets of conversations named slow* wait until release is
// called, after saying on entered that they started.
type heldForgets struct {
	entered chan string
	held    chan struct{}
	once    sync.Once
}

func holdForgets(t *testing.T) (*heldForgets, func(*service.Service)) {
	h := &heldForgets{entered: make(chan string, 8), held: make(chan struct{})}
	t.Cleanup(h.release) // before the service stops: cleanups run last in, first out
	return h, func(svc *service.Service) {
		svc.WrapForget(func(ctx context.Context, conv string, forget func(context.Context, string) (schemas.ForgetResponse, error)) (schemas.ForgetResponse, error) {
			if strings.HasPrefix(conv, "slow") {
				h.entered <- conv
				select {
				case <-h.held:
				case <-ctx.Done():
					return schemas.ForgetResponse{}, ctx.Err()
				}
			}
			return forget(ctx, conv)
		})
	}
}

func (h *heldForgets) release() { h.once.Do(func() { close(h.held) }) }

// waitEntered waits until the forget of conv is held.
func (h *heldForgets) waitEntered(t *testing.T, conv string) {
	t.Helper()
	select {
	case got := <-h.entered:
		if got != conv {
			t.Fatalf("forget of %s started; want %s", got, conv)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the forget of %s did not start", conv)
	}
}

// A forget that takes long holds one of its endpoint's slots, not the endpoint: a
// context read and another forget are answered meanwhile; with every slot taken, one
// more forget is answered Busy at once, and a freed slot serves again. (Before, each
// endpoint answered one request at a time: the second forget waited for the first.)
func TestServiceSlowForgetDelaysNeitherAContextReadNorAnotherForget(t *testing.T) {
	h, setup := holdForgets(t)
	s := startService(t, service.Config{MaxConcurrentRequests: 2}, setup)
	stored(t, s.st, "slow1", "slow2", "quick", "read", "later")

	first := asyncCall(s.client, schemas.ForgetSubject, `{"conversation":"slow1"}`)
	h.waitEntered(t, "slow1")
	var cx schemas.ContextResponse
	svcCall(t, s.client, schemas.ContextSubject, `{"conversation":"read"}`, &cx)
	if cx.Conversation != "read" || cx.LastSeq == 0 {
		t.Fatalf("context during a slow forget = %+v", cx)
	}
	var quick schemas.ForgetResponse
	svcCall(t, s.client, schemas.ForgetSubject, `{"conversation":"quick"}`, &quick)
	if quick.Deleted.ChatMessages != 1 {
		t.Fatalf("a forget during a slow forget = %+v; want its message deleted", quick)
	}

	second := asyncCall(s.client, schemas.ForgetSubject, `{"conversation":"slow2"}`)
	h.waitEntered(t, "slow2")
	// Both slots are held until release: an answer at all is an answer at once.
	code, desc := svcError(t, s.client, schemas.ForgetSubject, `{"conversation":"later"}`)
	if code != "503" || !strings.HasPrefix(desc, "busy: ") || !strings.Contains(desc, "forget") || !strings.Contains(desc, "nothing was done") {
		t.Fatalf("a forget with every slot taken: %s %q; want 503 busy", code, desc)
	}
	// Other endpoints have slots of their own.
	svcCall(t, s.client, schemas.ContextSubject, `{"conversation":"read"}`, &cx)

	h.release()
	for i, ch := range []<-chan *nats.Msg{first, second} {
		m := <-ch
		if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
			t.Fatalf("slow forget %d: error %s: %s", i+1, code, m.Header.Get(micro.ErrorHeader))
		}
	}
	var later schemas.ForgetResponse
	svcCall(t, s.client, schemas.ForgetSubject, `{"conversation":"later"}`, &later)
	if later.Deleted.ChatMessages != 1 {
		t.Fatalf("a forget after the slots freed = %+v", later)
	}
}

func TestServiceMaxConcurrentRequestsIsChecked(t *testing.T) {
	if err := (service.Config{MaxConcurrentRequests: -1}).Validate(); err == nil {
		t.Fatal("a negative MaxConcurrentRequests passed Validate")
	}
	if got := service.DefaultConfig().MaxConcurrentRequests; got <= 0 {
		t.Fatalf("default MaxConcurrentRequests = %d", got)
	}
}

// A caller that sends its next request as soon as it has the answer to the last is
// never answered Busy by an endpoint it alone uses: the request's slot is given back
// before its answer goes out. (Before, the slot was given back after: the next request
// could find it still taken; TestServiceSlowForgetDelaysNeitherAContextReadNorAnotherForget
// failed so in CI, its forget of slow2 answered Busy.)
func TestServiceSequentialCallerIsNeverBusy(t *testing.T) {
	s := startService(t, service.Config{MaxConcurrentRequests: 1})
	stored(t, s.st, "read")
	for i := range 300 {
		m, err := s.client.Request(schemas.ContextSubject, []byte(`{"conversation":"read"}`), 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
			t.Fatalf("call %d of one caller, one at a time: error %s: %s", i+1, code, m.Header.Get(micro.ErrorHeader))
		}
	}
}
