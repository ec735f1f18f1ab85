package systemtest

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/fakellm"
	"github.com/compactor/compactor/internal/proctest"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas"
)

// tenantViewGet asks the view at addr for path with token and returns the status and
// body.
func tenantViewGet(t *testing.T, addr, path, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxFor(t, 30*time.Second), http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// The web view of tenants, served by the api user of tenants.conf (serve with a tenants
// file and COMPACTOR_VIEW_LISTEN): acme's token lists and opens acme's conversation,
// compacted, with its messages and timeline, and gets nothing of globex's; the api is
// refused nothing doing so.
func TestTenantViewAsTheAPIUser(t *testing.T) {
	const acmeToken, globexToken = "acme-view-token-0123456789", "globex-view-token-0123456789"
	f := startTenants(t)
	file := filepath.Join(t.TempDir(), "tenants.json")
	if err := os.WriteFile(file, []byte(`{"tenants": {"acme": {"view_token_env": "ACME_VIEW_TOKEN"},
		"globex": {"view_token_env": "GLOBEX_VIEW_TOKEN"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	llm := fakellm.New(t)
	js := jetstream.DefaultConfig()
	env := tenantRoleEnv(t, "api", llm, js, map[string]string{"ACME_VIEW_TOKEN": acmeToken, "GLOBEX_VIEW_TOKEN": globexToken})
	env.ViewListen = "127.0.0.1:" + strconv.Itoa(proctest.FreePort(t))
	env.ViewToken = "operator-view-token-0123456789"
	apiLog := serveTenantEnv(t, f.r, env, js, file)
	for _, role := range []string{"trigger", "worker"} {
		serveTenantRole(t, f.r, role, file, llm)
	}
	ctx := ctxFor(t, 3*time.Minute)
	const conv = "viewed"
	acme := tenantClient(t, f.r.Connect("acme-producer"))
	msgs, needles := fakellm.NeedleConversation(20)
	for i, m := range msgs {
		if _, err := acme.Publish(ctx, conv, m); err != nil {
			t.Fatalf("publish %d as acme-producer: %v", i, err)
		}
	}
	if _, err := tenantClient(t, f.r.Connect("globex-producer")).Publish(ctx, conv,
		schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("globex only")}); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "acme's "+conv+" compacted", func() bool {
		cx, err := acme.Context(ctx, conv)
		return err == nil && cx.HasSummary
	})
	for _, path := range []string{"/t/acme/", "/t/acme/api/conversations", "/t/acme/api/c/" + conv,
		"/t/acme/c/" + conv, "/t/acme/api/c/" + conv + "/messages?from=1"} {
		code, body := tenantViewGet(t, env.ViewListen, path, acmeToken)
		if code != http.StatusOK || !strings.Contains(body, conv) || strings.Contains(body, "globex only") {
			t.Errorf("%s with acme's token: %d\n%.400s", path, code, body)
		}
	}
	if _, body := tenantViewGet(t, env.ViewListen, "/t/acme/api/c/"+conv+"/messages?from=1", acmeToken); !strings.Contains(body, needles[0]) {
		t.Errorf("acme's messages in the view have no %s", needles[0])
	}
	for _, path := range []string{"/t/globex/", "/t/globex/api/c/" + conv, "/t/globex/api/conversations"} {
		if code, body := tenantViewGet(t, env.ViewListen, path, acmeToken); code != http.StatusUnauthorized || strings.Contains(body, "globex only") {
			t.Errorf("%s with acme's token: %d; want 401\n%.400s", path, code, body)
		}
	}
	if l := apiLog.String(); strings.Contains(strings.ToLower(l), "permission") {
		t.Errorf("the api's log:\n%s", l)
	}
}
