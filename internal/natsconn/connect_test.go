package natsconn

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

func TestRedact(t *testing.T) {
	tests := []struct{ give, want string }{
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"nats://user:secret@a:4222,nats://token@b:4222", "nats://redacted@a:4222,nats://redacted@b:4222"},
		{"nats://a:4222, nats://b:4222", "nats://a:4222,nats://b:4222"},
	}
	for _, tc := range tests {
		if got := RedactURL(tc.give); got != tc.want {
			t.Errorf("RedactURL(%q) = %q; want %q", tc.give, got, tc.want)
		}
	}
}

// Every rule of Auth.Validate names the fields at fault and matches ErrConfig; no
// message holds a secret.
func TestAuthValidate(t *testing.T) {
	dir := t.TempDir()
	file := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const secret = "SUSECRETSEEDTHATMUSTNEVERLEAK"
	seed := file("seed.nk", secret+"\n")
	creds := file("user.creds", "-----BEGIN NATS USER JWT-----\n"+secret+"\n------END NATS USER JWT------\n")
	pem := file("ca.pem", "not a certificate "+secret)
	missing := filepath.Join(dir, "missing.pem")
	tests := []struct {
		name               string
		give               Auth
		urls               string
		wantField, wantOth string
		wantProblem        AuthProblem
	}{
		{name: "nothing", give: Auth{}, urls: "nats://a:4222"},
		{name: "token", give: Auth{Token: secret}, urls: "nats://a:4222"},
		{name: "user and password", give: Auth{User: "u", Password: secret}, urls: "nats://a:4222"},
		{name: "creds and token", give: Auth{CredsFile: creds, Token: secret}, wantField: "CredsFile", wantOth: "Token", wantProblem: Conflict},
		{name: "nkey and user", give: Auth{NKeyFile: seed, User: "u", Password: secret}, wantField: "NKeyFile", wantOth: "User", wantProblem: Conflict},
		{name: "token and user", give: Auth{Token: secret, User: "u", Password: "p"}, wantField: "Token", wantOth: "User", wantProblem: Conflict},
		{name: "url user and token", give: Auth{Token: secret}, urls: "nats://a:4222,nats://u:" + secret + "@b:4222", wantField: "URL", wantOth: "Token", wantProblem: Conflict},
		{name: "url token and creds", give: Auth{CredsFile: creds}, urls: secret + "@b:4222", wantField: "URL", wantOth: "CredsFile", wantProblem: Conflict},
		{name: "user without password", give: Auth{User: "u"}, wantField: "User", wantOth: "Password", wantProblem: Missing},
		{name: "password without user", give: Auth{Password: secret}, wantField: "Password", wantOth: "User", wantProblem: Missing},
		{name: "cert without key", give: Auth{CertFile: pem}, wantField: "CertFile", wantOth: "KeyFile", wantProblem: Missing},
		{name: "key without cert", give: Auth{KeyFile: pem}, wantField: "KeyFile", wantOth: "CertFile", wantProblem: Missing},
		{name: "ca file missing", give: Auth{CAFile: missing}, wantField: "CAFile", wantProblem: FileProblem},
		{name: "ca file is a directory", give: Auth{CAFile: dir}, wantField: "CAFile", wantProblem: FileProblem},
		{name: "ca file is no certificate", give: Auth{CAFile: pem}, wantField: "CAFile", wantProblem: FileProblem},
		{name: "client cert is no certificate", give: Auth{CertFile: pem, KeyFile: pem}, wantField: "CertFile", wantProblem: FileProblem},
		{name: "nkey file missing", give: Auth{NKeyFile: missing}, wantField: "NKeyFile", wantProblem: FileProblem},
		{name: "nkey file holds no seed", give: Auth{NKeyFile: seed}, wantField: "NKeyFile", wantProblem: FileProblem},
		{name: "creds file missing", give: Auth{CredsFile: missing}, wantField: "CredsFile", wantProblem: FileProblem},
		{name: "creds file holds no credentials", give: Auth{CredsFile: creds}, wantField: "CredsFile", wantProblem: FileProblem},
		{name: "inbox prefix", give: Auth{InboxPrefix: "_INBOX_worker"}, urls: "nats://a:4222"},
		{name: "inbox prefix with a wildcard", give: Auth{InboxPrefix: "_INBOX.*"}, wantField: "InboxPrefix", wantProblem: InvalidValue},
		{name: "inbox prefix ending in a dot", give: Auth{InboxPrefix: "_INBOX_x."}, wantField: "InboxPrefix", wantProblem: InvalidValue},
		{name: "url with a bad password", give: Auth{}, urls: "nats://u:" + secret + "%zz@a:4222", wantField: "URL", wantProblem: InvalidURL},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.give.Validate(tc.urls)
			if tc.wantProblem == 0 {
				if err != nil {
					t.Fatalf("Validate = %v; want nil", err)
				}
				return
			}
			var ae *AuthError
			if !errors.As(err, &ae) || !errors.Is(err, ErrConfig) {
				t.Fatalf("Validate = %v; want an *AuthError matching ErrConfig", err)
			}
			if ae.Field != tc.wantField || ae.Other != tc.wantOth || ae.Problem != tc.wantProblem {
				t.Fatalf("Validate = %+v; want field %s, other %q, problem %d", ae, tc.wantField, tc.wantOth, tc.wantProblem)
			}
			if strings.Contains(err.Error(), "SECRET") {
				t.Fatalf("error %q holds the secret", err)
			}
			if !strings.Contains(err.Error(), tc.wantField) {
				t.Fatalf("error %q does not name %s", err, tc.wantField)
			}
			// Connect checks the same through Option.
			_, cerr := Connect(orDefault(tc.urls), "test", zerolog.Nop(), tc.give.Option())
			if !errors.As(cerr, &ae) || ae.Field != tc.wantField || strings.Contains(cerr.Error(), "SECRET") || Unreachable(cerr) {
				t.Fatalf("Connect = %v; want the same AuthError, not unreachable, without the secret", cerr)
			}
		})
	}
}

func orDefault(urls string) string {
	if urls == "" {
		return "nats://127.0.0.1:1"
	}
	return urls
}

func TestUnreachableAndRefused(t *testing.T) {
	tests := []struct {
		name                 string
		give                 error
		unreachable, refused bool
	}{
		{"no servers", nats.ErrNoServers, true, false},
		{"timeout", nats.ErrTimeout, true, false},
		{"connection reset", &net.OpError{Op: "read", Err: syscall.ECONNRESET}, true, false},
		{"authorization violation", fmt.Errorf("connect: %w", nats.ErrAuthorization), false, true},
		{"tls alert", &net.OpError{Op: "remote error", Err: errors.New("tls: certificate required")}, false, true},
		{"unknown authority", &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}, false, true},
		{"secure connection wanted", nats.ErrSecureConnWanted, false, true},
		{"closed after the tls handshake", fmt.Errorf("%w: connection closed by remote after TLS handshake: %w", nats.ErrTLS,
			&net.OpError{Op: "write", Err: syscall.EPIPE}), false, true},
		{"tls handshake timeout", fmt.Errorf("%w: %w", nats.ErrTLS, &net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}), true, false},
		{"invalid option", &AuthError{Field: "Token", Problem: Conflict, Other: "User"}, false, false},
		{"anything else", errors.New("nats: unexpected"), false, false},
	}
	for _, tc := range tests {
		if got := Unreachable(tc.give); got != tc.unreachable {
			t.Errorf("%s: Unreachable = %v; want %v", tc.name, got, tc.unreachable)
		}
		if got := Refused(tc.give); got != tc.refused {
			t.Errorf("%s: Refused = %v; want %v", tc.name, got, tc.refused)
		}
	}
}

// nats.go dials a URL without a scheme as nats://, so its user info is a password too:
// it never shows (found by the outside review).
func TestRedactURLWithoutScheme(t *testing.T) {
	for _, u := range []string{"alice:s3cretpw@127.0.0.1:4222", "nats://a:4222, bob:s3cretpw@b:4222"} {
		if !URLHasUserInfo(u) {
			t.Fatalf("URLHasUserInfo(%q) = false", u)
		}
		if got := RedactURL(u); strings.Contains(got, "s3cretpw") {
			t.Errorf("RedactURL(%q) = %q: the password shows", u, got)
		}
		c := &Connection{URL: u, from: map[string]*Source{"URL": {Name: func(string) string { return "-s/--server" }}}}
		if got := c.Describe(); strings.Contains(got, "s3cretpw") {
			t.Errorf("Describe() = %q: the password shows", got)
		}
	}
}
