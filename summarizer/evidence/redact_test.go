package evidence_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/summarizer/evidence"
)

// Fake secrets in the shapes real ones have (none of them is real).
const (
	fakeOpenAI    = "sk-proj-Zq3xT9vLm2Kp8RwY4bNc7Hd1Jf6Gs0Ae"
	fakeAnthropic = "sk-ant-api03-Qw8Er7Ty6Ui5Op4As3Df2Gh1Jk0Lz"
	fakeAWS       = "AKIAIOSFODNN7EXAMPLE"
	fakeGitHub    = "ghp_4fR8tY2uI6oP0aS3dF7gH1jK5lZ9xC2vB6nM"
	fakeGitHubPAT = "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz"
	fakeSlack     = "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
	fakeGitLab    = "glpat-Ab3Cd5Ef7Gh9Ij1Kl3Mn"
	fakeJWT       = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
	fakeGoogle    = "AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q"
)

// TestRedact: every secret shape is replaced, and the words around it stay.
func TestRedact(t *testing.T) {
	tests := []struct {
		give    string
		want    string // "" when only gone matters
		secrets []string
	}{
		{give: `curl -H "Authorization: Bearer abc123def456ghi789" https://api.example.com/v1/items`,
			want: `curl -H "Authorization: Bearer [redacted]" https://api.example.com/v1/items`},
		{give: `curl -H 'authorization: token ` + fakeGitHub + `' https://api.github.com/user`, secrets: []string{fakeGitHub[4:]}},
		{give: `curl -H "X-Api-Key: 9f8e7d6c5b4a" https://api.example.com`, want: `curl -H "X-Api-Key: [redacted]" https://api.example.com`},
		{give: `git clone https://alice:s3cr3tPass@github.com/org/repo.git`, want: `git clone https://alice:[redacted]@github.com/org/repo.git`},
		{give: `git clone https://` + fakeGitHub + `@github.com/org/repo.git`, want: `git clone https://[redacted]@github.com/org/repo.git`},
		{give: `psql postgres://app:hunter2@db.internal:5432/app`, want: `psql postgres://app:[redacted]@db.internal:5432/app`},
		{give: `curl "https://api.example.com/v1/data?api_key=abcd1234efgh&format=json"`, want: `curl "https://api.example.com/v1/data?api_key=[redacted]&format=json"`},
		{give: `https://x.blob.core.windows.net/c/f?sv=2022-11-02&sig=Xz7Fo%2BRkmJqeJxT%2FdEzyWcbVnpLq%3D&se=2026`, want: `https://x.blob.core.windows.net/c/f?sv=2022-11-02&sig=[redacted]&se=2026`},
		{give: `https://example.com/cb?access_token=ya29.a0Af&state=1`, want: `https://example.com/cb?access_token=[redacted]&state=1`},
		{give: `export GITHUB_TOKEN=` + fakeGitHub, want: `export GITHUB_TOKEN=[redacted]`},
		{give: `API_KEY=abc123 python run.py`, want: `API_KEY=[redacted] python run.py`},
		{give: `AWS_SECRET_ACCESS_KEY="wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY" aws s3 ls`, want: `AWS_SECRET_ACCESS_KEY="[redacted]" aws s3 ls`},
		{give: `DB_PASSWORD='p@ss w0rd' ./migrate`, secrets: []string{"p@ss"}},
		{give: `client --token=abc.def.ghi --verbose`, want: `client --token=[redacted] --verbose`},
		{give: `vault login --password hunter22 -method=userpass`, want: `vault login --password [redacted] -method=userpass`},
		{give: `app --client-secret 'Zx9-Yw8' run`, want: `app --client-secret '[redacted]' run`},
		{give: `mysql -u root -psecret123 mydb`, want: `mysql -u root -p[redacted] mydb`},
		{give: `mysqldump -h db -u admin -pTopSecret! shop > dump.sql`, want: `mysqldump -h db -u admin -p[redacted] shop > dump.sql`},
		{give: `docker login -u bob -p s3cret registry.example.com`, want: `docker login -u bob -p [redacted] registry.example.com`},
		{give: `curl -u admin:S3cretPw https://api.example.com/x`, want: `curl -u admin:[redacted] https://api.example.com/x`},
		{give: `curl --user 'bob:pa55' -X POST https://x.example`, want: `curl --user 'bob:[redacted]' -X POST https://x.example`},
		{give: `curl "https://maps.googleapis.com/maps/api/geocode/json?address=x&key=Q9x8Rt7Yu6"`, want: `curl "https://maps.googleapis.com/maps/api/geocode/json?address=x&key=[redacted]"`},
		{give: `curl -H "Cookie: sessionid=8f7e6d5c4b3a" https://x.example`, want: `curl -H "Cookie: [redacted]" https://x.example`},
		{give: `PGPASSWORD=hunter2 psql -h db -U app`, want: `PGPASSWORD=[redacted] psql -h db -U app`},
		{give: `redis-cli -h cache -a r3disPw PING`, want: `redis-cli -h cache -a [redacted] PING`},
		{give: `sshpass -p 'mypass' ssh user@host`, want: `sshpass -p '[redacted]' ssh user@host`},
		{give: `{"username": "bob", "password": "hunter2"}`, want: `{"username": "bob", "password": "[redacted]"}`},
		{give: `OPENAI_API_KEY is ` + fakeOpenAI, want: `OPENAI_API_KEY is [redacted]`},
		{give: `key ` + fakeAnthropic + ` works`, want: `key [redacted] works`},
		{give: `aws configure set aws_access_key_id ` + fakeAWS, want: `aws configure set aws_access_key_id [redacted]`},
		{give: `use ` + fakeGitHubPAT + ` here`, want: `use [redacted] here`},
		{give: `SLACK=` + fakeSlack, secrets: []string{fakeSlack[5:]}},
		{give: `token: ` + fakeGitLab, secrets: []string{fakeGitLab[6:]}},
		{give: `cookie ` + fakeJWT + ` expired`, want: `cookie [redacted] expired`},
		{give: `maps key ` + fakeGoogle, want: `maps key [redacted]`},
		{give: `sk_live_4eC39HqLyjWDarjtT1zdp7dc charge`, want: `[redacted] charge`},
		{give: `POST https://hooks.slack.com/services/T000/B000/XXXXabcd`, want: `POST https://hooks.slack.com/services/[redacted]`},
		{give: "cat > id <<EOF\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\nEOF",
			want: "cat > id <<EOF\n[redacted]\nEOF"},
		{give: "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7", want: "[redacted]"},
	}
	for _, tt := range tests {
		got := evidence.Redact(tt.give)
		if tt.want != "" && got != tt.want {
			t.Errorf("Redact(%q)\n got %q\nwant %q", tt.give, got, tt.want)
		}
		if !strings.Contains(got, evidence.Redacted) {
			t.Errorf("Redact(%q) = %q: nothing redacted", tt.give, got)
		}
		for _, s := range tt.secrets {
			if strings.Contains(got, s) {
				t.Errorf("Redact(%q) = %q: %q is still there", tt.give, got, s)
			}
		}
		if again := evidence.Redact(got); again != got {
			t.Errorf("Redact is not idempotent on %q: %q", got, again)
		}
	}
}

// TestRedactKeeps: near-misses of the secret shapes stay as they are.
func TestRedactKeeps(t *testing.T) {
	for _, s := range []string{
		"python manage.py runserver --port 8080",
		"docker run -p 3000:3000 -p 8443:443 nginx",
		"mysql -u root -p mydb",
		"pip install scikit-learn sk-learn",
		"curl 'https://tracker.example.com/tasks?task-id=123&sort=asc'",
		"cat /keys/README.md /etc/ssl/private/README",
		"git show 3f2a9c1d8e7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f",
		"git clone git@github.com:org/repo.git",
		"ssh://git@github.com/org/repo.git",
		"curl -H \"Authorization: Bearer $TOKEN\" https://api.example.com",
		"export GITHUB_TOKEN=$(gh auth token)",
		"API_KEY=${API_KEY:-} ./run.sh",
		"set password=<your password> in the form",
		"max_tokens=4096 token_count=12 monkey=3",
		"grep -rn 'api_key' src/",
		"the bearer of bad news; bearer tokens expire",
		"kubectl get secret my-secret -o yaml",
		"go test ./... -run TestToken",
		"./configure --with-ssl --token-file /run/token",
		"--no-password prompt",
		"ls ~/.ssh/id_ed25519.pub",
		"https://docs.python.org/3/library/secrets.html",
		"-----BEGIN PUBLIC KEY-----",
		"password reset flow for TICKET-42",
		"models.AutoField(auto_created=True, primary_key=True, serialize=False)",
		"self._constraint_names(model, [field.column], foreign_key=False)",
		"sorted(instances, key=attrgetter(\"pk\"))",
		"def __init__(self, verbose_name=None, password=None):",
		"where $ORDER is set in the session cookie: if (isset($ORDER)) {",
		"cache key=user_profile_v2",
		"curl 'https://api.example.com/items?sort=asc&key=name'",
		"curl -u admin https://api.example.com/x",
		"curl -s -X POST https://x.example -d @body.json",
	} {
		if got := evidence.Redact(s); got != s {
			t.Errorf("Redact(%q) = %q, want it unchanged", s, got)
		}
	}
}

// TestRedactPrefix: a cut never leaves the start of a secret.
func TestRedactPrefix(t *testing.T) {
	s := "run with " + fakeAnthropic + " now"
	for n := 0; n <= len(s); n++ {
		got, more := evidence.RedactPrefix(s, n)
		if more != (n < len(s)) {
			t.Errorf("n=%d: more = %v", n, more)
		}
		if strings.Contains(got, "sk-ant") || strings.Contains(got, fakeAnthropic[10:20]) {
			t.Errorf("n=%d: %q keeps part of the secret", n, got)
		}
	}
	pem := "key:\n-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\n-----END PRIVATE KEY-----\n"
	got, _ := evidence.RedactPrefix(pem, 60)
	if strings.Contains(got, "MIIE") {
		t.Errorf("a PEM block cut short is not redacted: %q", got)
	}
}

// TestExtractRedacts: no secret reaches an evidence item, whatever kind it would be,
// and a command cut to its compact form was redacted before the cut.
func TestExtractRedacts(t *testing.T) {
	long := strings.Repeat("--flag ", 20) // pushes the secret across the 160-character cut
	entries := []schemas.Entry{
		call(2, "bash", map[string]any{"command": `curl -H "Authorization: Bearer tok123456789" "https://bob:pw0rd@api.example.com/x?api_key=k3y5678&q=1"`}),
		call(3, "bash", map[string]any{"command": "tool " + long + fakeAnthropic}),
		call(4, "bash", map[string]any{"command": "export OPENAI_API_KEY=" + fakeOpenAI + " && python app.py"}),
		text(5, schemas.RoleUser, "the endpoint is https://api.example.com/hook?token=Zz9Yy8Xx7 and my key is "+fakeAWS),
		text(6, schemas.RoleAssistant, "```bash\nmysql -u root -phunter22 shop < db/schema.sql\n```"),
		call(7, "fetch", map[string]any{"url": "https://user:pass1234@example.com/data.json"}),
	}
	items := evidence.Extract(entries)
	secrets := []string{"tok123456789", "pw0rd", "k3y5678", "sk-ant", fakeAnthropic[7:15], fakeOpenAI[8:], "Zz9Yy8Xx7", fakeAWS, "hunter22", "pass1234"}
	for _, it := range items {
		for _, s := range secrets {
			if strings.Contains(it.Value, s) {
				t.Errorf("%s %q holds %q", it.Kind, it.Value, s)
			}
		}
	}
	for _, u := range []string{"url https://bob:[redacted]@api.example.com/x?api_key=[redacted]&q=1", "url https://api.example.com/hook?token=[redacted]",
		"url https://user:[redacted]@example.com/data.json"} {
		if !slices.Contains(got(items), u) {
			t.Errorf("a redacted URL is not kept whole: want %q in %q", u, got(items))
		}
	}
	if !slices.Contains(got(items), "file db/schema.sql") || !slices.Contains(got(items), "command export OPENAI_API_KEY=[redacted] && python app.py") {
		t.Errorf("redaction lost what is not secret: %q", got(items))
	}
}

// TestSince: items whose newest reference is older than the first message left go;
// the rest stay, and nothing is left when no message is.
func TestSince(t *testing.T) {
	ev := &schemas.Evidence{ThroughSeq: 30, Items: []schemas.EvidenceItem{
		{Kind: schemas.EvidenceFile, Value: "a.go", Count: 2, LastSeq: 9},
		{Kind: schemas.EvidenceFile, Value: "b.go", Count: 1, LastSeq: 10},
		{Kind: schemas.EvidenceCommand, Value: "make", Count: 4, LastSeq: 30},
	}}
	if got := evidence.Since(ev, 1); got != ev {
		t.Errorf("Since(1) changed the value: %+v", got)
	}
	got := evidence.Since(ev, 10)
	if len(got.Items) != 2 || got.Items[0].Value != "b.go" || got.ThroughSeq != 30 || len(ev.Items) != 3 {
		t.Errorf("Since(10) = %+v (input now %+v)", got, ev)
	}
	if got := evidence.Since(ev, 0); len(got.Items) != 0 {
		t.Errorf("Since(0) = %+v; want no item", got)
	}
}

// Evidence stored before secrets were redacted is redacted when it is carried forward:
// a stored secret does not survive the next compaction.
func TestMergeRedactsCarriedItems(t *testing.T) {
	prev := &schemas.Evidence{ThroughSeq: 9, Items: []schemas.EvidenceItem{
		{Kind: schemas.EvidenceCommand, Value: "export GITHUB_TOKEN=" + fakeGitHub, Count: 1, LastSeq: 3},
		{Kind: schemas.EvidenceURL, Value: "https://bob:pw0rd@api.example.com/x", Count: 2, LastSeq: 5},
		{Kind: schemas.EvidenceURL, Value: "https://bob:[redacted]@api.example.com/x", Count: 1, LastSeq: 7},
	}}
	next := evidence.Merge(prev, nil, 9)
	for _, it := range next.Items {
		if strings.Contains(it.Value, fakeGitHub[4:]) || strings.Contains(it.Value, "pw0rd") {
			t.Errorf("carried %s %q", it.Kind, it.Value)
		}
	}
	want := []string{"command export GITHUB_TOKEN=[redacted]", "url https://bob:[redacted]@api.example.com/x"}
	if !slices.Equal(got(next.Items), want) || next.Items[1].Count != 3 || next.Items[1].LastSeq != 7 {
		t.Errorf("merged %+v; want %q, the two URLs one item of 3 references", next.Items, want)
	}
	if err := next.Validate(); err != nil {
		t.Fatal(err)
	}
}
