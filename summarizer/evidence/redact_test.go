package evidence_test

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compactor/compactor/internal/corpustest"
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
		{give: `DB_PASSWORD='p@ss w0rd' ./migrate`, want: `DB_PASSWORD='[redacted]' ./migrate`},
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
		// Found by the outside review. Quoted values go whole, in either quote, for every
		// key=value, key: value and flag rule (a quoted password with a blank kept its end).
		{give: `mysql -u root -p'Hunter2Secret' db`, want: `mysql -u root -p'[redacted]' db`},
		{give: `mysql -u root -p"Hunter2 Secret" db`, want: `mysql -u root -p"[redacted]" db`},
		{give: `PGPASSWORD='Hunter2 Secret' psql -h db app`, want: `PGPASSWORD='[redacted]' psql -h db app`},
		{give: `export API_TOKEN="Hunter2 Secret" && ./run`, want: `export API_TOKEN="[redacted]" && ./run`},
		{give: `curl "https://x.example/a?token='Hunter2 Secret'"`, want: `curl "https://x.example/a?token='[redacted]'"`},
		{give: `app --password "Hunter2 Secret" run`, want: `app --password "[redacted]" run`},
		{give: `app --token='Hunter2 Secret' run`, want: `app --token='[redacted]' run`},
		{give: `{"password": "it's Hunter2"}`, want: `{"password": "[redacted]"}`},
		{give: `{'password': 'Hunter2 "x" Secret'}`, want: `{'password': '[redacted]'}`},
		{give: `redis-cli -a 'Hunter2 Secret' PING`, want: `redis-cli -a '[redacted]' PING`},
		{give: `curl -u 'bob:Hunter2 Secret' https://x.example`, want: `curl -u 'bob:[redacted]' https://x.example`},
		{give: `docker login -u bob -p "Hunter2 Secret" registry.example.com`, want: `docker login -u bob -p "[redacted]" registry.example.com`},
		// YAML and other unquoted key: value.
		{give: `password: Hunter2Secret`, want: `password: [redacted]`},
		{give: "db:\n  DB_PASSWORD: Hunter2Secret\n  user: app", want: "db:\n  DB_PASSWORD: [redacted]\n  user: app"},
		{give: `api_key: "Hunter2Secret"`, want: `api_key: "[redacted]"`},
		{give: `  token: 'Hunter2 Secret'`, want: `  token: '[redacted]'`},
		{give: `- POSTGRES_PASSWORD: postgres`, want: `- POSTGRES_PASSWORD: [redacted]`},
		{give: `{password: Hunter2Secret, user: bob}`, want: `{password: [redacted], user: bob}`},
		{give: `aws_secret_access_key: wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY`, want: `aws_secret_access_key: [redacted]`},
		{give: `"token": "Hunter2Secret"`, want: `"token": "[redacted]"`},
		// Tools that take a secret as a plain argument.
		{give: `aws configure set aws_secret_access_key wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY`, want: `aws configure set aws_secret_access_key [redacted]`},
		{give: `aws configure set aws_session_token 'FwoGZXIvYXdzEJr' --profile dev`, want: `aws configure set aws_session_token '[redacted]' --profile dev`},
		{give: `az login -u a@b.c -p Hunter2Secret`, want: `az login -u a@b.c -p [redacted]`},
		{give: `az login --service-principal -u app -p 'Hunter2 Secret' --tenant t`, want: `az login --service-principal -u app -p '[redacted]' --tenant t`},
		{give: `openssl enc -aes-256-cbc -k Hunter2Secret -in f -out f.enc`, want: `openssl enc -aes-256-cbc -k [redacted] -in f -out f.enc`},
		{give: `openssl enc -aes-128-cbc -K 00112233445566778899aabbccddeeff -iv 0 -in f`, want: `openssl enc -aes-128-cbc -K [redacted] -iv 0 -in f`},
		{give: `openssl enc -d -aes-256-cbc -pass pass:Hunter2Secret -in f.enc`, want: `openssl enc -d -aes-256-cbc -pass pass:[redacted] -in f.enc`},
		{give: `openssl pkcs12 -export -in c.pem -passout 'pass:Hunter2 Secret' -out c.p12`, want: `openssl pkcs12 -export -in c.pem -passout 'pass:[redacted]' -out c.p12`},
		{give: `htpasswd -b .htpasswd admin Hunter2Secret`, want: `htpasswd -b .htpasswd admin [redacted]`},
		{give: `htpasswd -c -b /etc/nginx/.htpasswd bob 'Hunter2 Secret' && nginx -s reload`, want: `htpasswd -c -b /etc/nginx/.htpasswd bob '[redacted]' && nginx -s reload`},
		{give: `htpasswd -nbB admin Hunter2Secret > auth`, want: `htpasswd -nbB admin [redacted] > auth`},
		{give: `ssh-keygen -t ed25519 -N 'Hunter2 Secret' -f key`, want: `ssh-keygen -t ed25519 -N '[redacted]' -f key`},
		{give: `echo Hunter2Secret | sudo -S apt-get update`, want: `echo [redacted] | sudo -S apt-get update`},
		{give: `echo 'Hunter2 Secret' | sudo -kS ls /root`, want: `echo '[redacted]' | sudo -kS ls /root`},
		{give: `curl -H "Authorization: token Hunter2Secret99" https://api.github.com/user`, want: `curl -H "Authorization: token [redacted]" https://api.github.com/user`},
		{give: `curl -H 'Authorization: Basic YWxhZGRpbjpvcGVuc2VzYW1l' https://x.example`, want: `curl -H 'Authorization: Basic [redacted]' https://x.example`},
		{give: `headers = {"Authorization": "Basic YWxhZGRpbjpvcGVuc2VzYW1l"}`, want: `headers = {"Authorization": "Basic [redacted]"}`},
		// Found by the second outside review: assignments with blanks around "=" (code,
		// config files, PowerShell), literal values that only start like a reference, a
		// percent-encoded value, an escaped quote inside a double-quoted value, SQL.
		{give: `api_key = "Zq9Xr8Wp7Vn6Mm5Ll4Kk"`, want: `api_key = "[redacted]"`},
		{give: `password = hunter2pw`, want: `password = [redacted]`},
		{give: `const apiKey = "Zq9Xr8Wp7Vn6Mm5Ll4Kk";`, want: `const apiKey = "[redacted]";`},
		{give: `os.environ["DB_PASSWORD"] = "Tr0ub4dor&3x"`, want: `os.environ["DB_PASSWORD"] = "[redacted]"`},
		{give: `$env:GITHUB_TOKEN = "Zq9Xr8Wp7Vn6Mm5Ll4Kk"`, want: `$env:GITHUB_TOKEN = "[redacted]"`},
		{give: `client_secret = 'Zq9Xr8Wp7Vn6Mm5Ll4Kk'`, want: `client_secret = '[redacted]'`},
		{give: `SECRET_KEY = "django-insecure-9f8e7d6c5b4a3"`, want: `SECRET_KEY = "[redacted]"`},
		{give: `password := "Hunter2 Secret"`, want: `password := "[redacted]"`},
		{give: `openai.api_key = "Zq9Xr8Wp7Vn6Mm5Ll4Kk"; print(1)`, want: `openai.api_key = "[redacted]"; print(1)`},
		{give: `export DB_PASSWORD='$uperS3cretPw9'`, want: `export DB_PASSWORD='[redacted]'`},
		{give: `{"password": "$2b$10$N9qo8uLOickgx2ZMRZoMye"}`, want: `{"password": "[redacted]"}`},
		{give: `{"password": "$uperS3cretPw9"}`, want: `{"password": "[redacted]"}`},
		{give: `PASSWORD="$2b$10$N9qo8uLOickgx2ZMRZoMye" ./run`, want: `PASSWORD="[redacted]" ./run`},
		{give: `curl "https://api.example.com/v1?api_key=%41bc123def456ghi789"`, want: `curl "https://api.example.com/v1?api_key=[redacted]"`},
		{give: `PASSWORD="ab\"cd9f8e7d6c" ./run`, want: `PASSWORD="[redacted]" ./run`},
		{give: `{"password": "ab\"cd9f8e7d6c"}`, want: `{"password": "[redacted]"}`},
		{give: `psql -c "ALTER USER app WITH PASSWORD 'Tr0ub4dorX9'"`, want: `psql -c "ALTER USER app WITH PASSWORD '[redacted]'"`},
		{give: `CREATE ROLE app LOGIN PASSWORD 'Tr0ub4dorX9';`, want: `CREATE ROLE app LOGIN PASSWORD '[redacted]';`},
		{give: `CREATE USER 'app'@'%' IDENTIFIED BY 'Tr0ub4dorX9';`, want: `CREATE USER 'app'@'%' IDENTIFIED BY '[redacted]';`},
		{give: `ALTER USER root@localhost IDENTIFIED WITH mysql_native_password BY "Tr0ub4dor X9"`, want: `ALTER USER root@localhost IDENTIFIED WITH mysql_native_password BY "[redacted]"`},
		// Also found by the second review: a password given to --password-stdin, and a
		// token-like value in angle brackets after a YAML key.
		{give: `docker login -u me --password-stdin <<< 'Hunter2Pass!x'`, want: `docker login -u me --password-stdin <<< '[redacted]'`},
		{give: `echo "Hunter2Pass9" | docker login -u me --password-stdin ghcr.io`, want: `echo "[redacted]" | docker login -u me --password-stdin ghcr.io`},
		{give: `printf '%s' Hunter2Pass9 | helm registry login r.example -u me --password-stdin`, want: `printf '%s' [redacted] | helm registry login r.example -u me --password-stdin`},
		{give: `token: <svc-Q9x8Rt7Yu6Io5>`, want: `token: [redacted]`},
		// A type between the name and "=": Python and TypeScript annotations, Go's var.
		{give: `password: str = "Hunter2x9"`, want: `password: str = "[redacted]"`},
		{give: `const apiKey: string = 'Zq9Xr8Wp7Vn6Mm5Ll4Kk';`, want: `const apiKey: string = '[redacted]';`},
		{give: `    DB_PASSWORD: Final[str] = "Hunter2 x9"`, want: `    DB_PASSWORD: Final[str] = "[redacted]"`},
		{give: `var password string = "Hunter2x9"`, want: `var password string = "[redacted]"`},
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
		// Near-misses of the rules the outside review asked for.
		"mysql -u root -p'' db",
		"primary_key: id",
		"keys: [a, b]",
		"token_count: 3",
		"max_tokens: 4096",
		"  secretKeyRef:\n    name: db\n    key: password",
		"password:\n  from_env: DB_PASSWORD",
		"token: ${{ secrets.GITHUB_TOKEN }}",
		"password: \"{{ vault_db_password }}\"",
		"password: <your password>",
		"api_key: null",
		"def login(self, password: str) -> bool:",
		"    api_key: Optional[str] = None",
		"  password: string;",
		"    token: String,",
		"    secret: str | None = None",
		"const user = { name, password: req.body.password };",
		"redis://cache:6379",
		"aws configure set region us-east-1",
		"aws configure get aws_secret_access_key",
		"az login --use-device-code",
		"openssl req -new -key server.key -out server.csr",
		"openssl enc -d -aes-256-cbc -pass env:ENC_PASS -in f.enc",
		"openssl enc -d -aes-256-cbc -pass file:pw.txt -in f.enc",
		"htpasswd -c .htpasswd admin",
		"htpasswd -v .htpasswd admin",
		"ssh-keygen -t ed25519 -N \"\" -f key",
		"ssh-keygen -t rsa -b 4096 -C me@example.com",
		"echo hello | sudo tee /etc/motd",
		"echo \"$SUDO_PASS\" | sudo -S ls",
		"echo done | sudo -u app -H ls",
		"export PASSWORD=\"$DB_PASSWORD\"",
		"TOKEN=\"$(gh auth token)\" ./release.sh",
		// Found on the corpus: prose, and a tool's signature in a YAML config.
		"2. You're not including the CSRF token: If you're making a POST request via AJAX",
		"  signature: submit '<flag>'",
		"  signature: scroll_down",
		// Near-misses of the rules of the second outside review: code that assigns a
		// name, a call, a literal or a number, comparisons, and references.
		"x = 5",
		"password = None",
		"password = getpass()",
		"password = getpass.getpass(\"Password: \")",
		"password = os.environ[\"PW\"]",
		"token = tokenizer(x)",
		"key = lambda x: x",
		"api_key = settings.API_KEY",
		"password = request.form['password']",
		"if password == \"Hunter2Secret\":",
		"if (token === 'Hunter2Secret9') {",
		"assert password != 'Hunter2Secret9'",
		"password = new_password",
		"password = \"\"",
		"max_token = 4096",
		"token := r.Header.Get(\"X-Token\")",
		"password = f\"{prefix}{suffix}\"",
		"export DB_PASSWORD=\"$SECRET\"",
		"API_KEY=${API_KEY:-default}",
		"password=%s",
		"password = '${DB_PASSWORD}'",
		"{\"password\": \"${DB_PASSWORD}\", \"token\": \"%s\"}",
		"echo $CR_PAT | docker login ghcr.io -u me --password-stdin",
		"echo \"$TOKEN\" | docker login -u me --password-stdin",
		"cat ~/token.txt | docker login -u me --password-stdin",
		"docker login -u me --password-stdin < ~/token.txt",
		"docker login -u me --password-stdin <<< \"$TOKEN\"",
		"echo ok | docker login --help",
		"token: <your token here>",
		"api_key: <API_KEY>",
		"token: str = Depends(oauth2_scheme)",
		"password: Optional[str] = Field(default=None, repr=False)",
		"var password string = cfg.Password",
		"    token: str | None = None",
		"SET PASSWORD = '<your password>'",
		"psql -c \"ALTER USER app WITH PASSWORD NULL\"",
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

// TestExtractRedactsReviewShapes: the shapes the outside review found passing through
// reach no evidence item, and the commands are kept with only their secrets gone.
func TestExtractRedactsReviewShapes(t *testing.T) {
	commands := map[string]string{
		`mysql -u root -p'Hunter2Secret' shop < db/schema.sql`:                    `mysql -u root -p'[redacted]' shop < db/schema.sql`,
		`PGPASSWORD='Hunter2 Secret' psql -h db app`:                              `PGPASSWORD='[redacted]' psql -h db app`,
		`aws configure set aws_secret_access_key wJalrXUtnFEMIK7MDENGbPxRfi`:      `aws configure set aws_secret_access_key [redacted]`,
		`az login -u a@b.c -p Hunter2Secret`:                                      `az login -u a@b.c -p [redacted]`,
		`openssl enc -d -aes-256-cbc -pass pass:Hunter2Secret -in f.enc`:          `openssl enc -d -aes-256-cbc -pass pass:[redacted] -in f.enc`,
		`openssl enc -aes-256-cbc -k Hunter2Secret -in f -out f.enc`:              `openssl enc -aes-256-cbc -k [redacted] -in f -out f.enc`,
		`htpasswd -b .htpasswd admin Hunter2Secret`:                               `htpasswd -b .htpasswd admin [redacted]`,
		`curl -H "Authorization: token Hunter2Secret99" https://x.example/a`:      `curl -H "Authorization: token [redacted]" https://x.example/a`,
		`curl -H 'Authorization: Basic SHVudGVyMlNlY3JldA==' https://x.example/b`: `curl -H 'Authorization: Basic [redacted]' https://x.example/b`,
	}
	var entries []schemas.Entry
	seq := uint64(2)
	for c := range commands {
		entries = append(entries, call(seq, "bash", map[string]any{"command": c}))
		seq++
	}
	entries = append(entries,
		text(seq, schemas.RoleAssistant, "```yaml\ndb:\n  password: Hunter2Secret\n  api_key: \"Hunter2Key\"\n```\nthen run `cat config/db.yaml`"),
		call(seq+1, "Write", map[string]any{"file_path": "config/db.yaml", "content": "DB_PASSWORD: Hunter2Secret\n"}))
	items := evidence.Extract(entries)
	for _, it := range items {
		if strings.Contains(it.Value, "Hunter2") || strings.Contains(it.Value, "wJalr") || strings.Contains(it.Value, "Secret'") {
			t.Errorf("%s %q holds the secret", it.Kind, it.Value)
		}
	}
	for _, want := range commands {
		if !slices.Contains(got(items), "command "+want) {
			t.Errorf("want %q among %q", "command "+want, got(items))
		}
	}
}

// TestExtractRedactsSpacedAssignments: the second outside review's commands (a config
// line written by printf, a key set in python -c, SQL that sets a password) reach no
// evidence item with their secret, and are kept with only the secret gone.
func TestExtractRedactsSpacedAssignments(t *testing.T) {
	commands := map[string]string{
		`printf 'password = Hunter2pw9x\n' >> /etc/app/db.ini`:                         `printf 'password = [redacted]\n' >> /etc/app/db.ini`,
		`python -c 'import openai; openai.api_key = "Zq9Xr8Wp7Vn6Mm5Ll4Kk"; print(1)'`: `python -c 'import openai; openai.api_key = "[redacted]"; print(1)'`,
		`psql -c "ALTER USER app WITH PASSWORD 'Tr0ub4dorX9'"`:                         `psql -c "ALTER USER app WITH PASSWORD '[redacted]'"`,
		`mysql -e "CREATE USER 'app'@'%' IDENTIFIED BY 'Tr0ub4dorX8'"`:                 `mysql -e "CREATE USER 'app'@'%' IDENTIFIED BY '[redacted]'"`,
		`export DB_PASSWORD='$uperS3cretPw9' && ./migrate`:                             `export DB_PASSWORD='[redacted]' && ./migrate`,
	}
	var entries []schemas.Entry
	seq := uint64(2)
	for c := range commands {
		entries = append(entries, call(seq, "bash", map[string]any{"command": c}))
		seq++
	}
	entries = append(entries, call(seq, "Write", map[string]any{"file_path": "app/settings.py",
		"content": "SECRET_KEY = \"django-insecure-9f8e7d6c5b4a3\"\nDEBUG = True\n"}))
	items := evidence.Extract(entries)
	for _, it := range items {
		for _, s := range []string{"Hunter2pw9x", "Zq9Xr8Wp7Vn6Mm5Ll4Kk", "Tr0ub4dorX9", "Tr0ub4dorX8", "uperS3cretPw9", "9f8e7d6c5b4a3"} {
			if strings.Contains(it.Value, s) {
				t.Errorf("%s %q holds %q", it.Kind, it.Value, s)
			}
		}
	}
	for _, want := range commands {
		if !slices.Contains(got(items), "command "+want) {
			t.Errorf("want %q among %q", "command "+want, got(items))
		}
	}
}

// TestRedactCorpusCommands: over the shell commands of the corpus, Redact changes only
// values given to secret-named keys (SECRET_KEY='test', {"token": "value"} in test
// scripts) and the one real password (curl -u user:password): the rules do not redact
// ordinary commands. A line it redacts in another form fails the test, to be reviewed.
func TestRedactCorpusCommands(t *testing.T) {
	reviewed := regexp.MustCompile(`(?i)(?:["']?\b(?:secret|token|password|api_key|secret_key)["']?\s*[:=]\s*["']\[redacted\]["']|curl -u theagentcompany:\[redacted\] )`)
	commands, redacted := 0, 0
	for _, c := range corpustest.Load(t) {
		for _, e := range c.Entries {
			for _, tc := range e.Message.ToolCalls {
				var args map[string]any
				if json.Unmarshal([]byte(tc.Function.Arguments), &args) != nil {
					continue
				}
				cmd, ok := args["command"].(string)
				if !ok {
					continue
				}
				commands++
				for _, line := range strings.Split(evidence.Redact(cmd), "\n") {
					if !strings.Contains(line, evidence.Redacted) {
						continue
					}
					redacted++
					if !reviewed.MatchString(line) {
						t.Errorf("%s: an unreviewed redaction: %q", c.Name, line)
					}
				}
			}
		}
	}
	t.Logf("%d commands, %d lines redacted", commands, redacted)
	if commands == 0 || redacted == 0 {
		t.Fatalf("%d commands, %d lines redacted: the check proves nothing", commands, redacted)
	}
}
