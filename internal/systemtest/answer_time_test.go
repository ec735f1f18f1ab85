package systemtest

import (
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/compactor/compactor/internal/rolestest"
	"github.com/compactor/compactor/pipeline/service"
)

// The service's answer may come as late as its longest wait for a compaction's outcome
// (service.Config.MaxWait): the api user of both shipped configurations may answer that
// late (allow_responses' expiry; the server's default is 2 minutes), and tenants.conf's
// exports keep the way back that long (response_threshold; also 2 minutes by default).
// TestReviewTenantAnswerAfterTwoMinutesIsDelivered shows it over the wire.
func TestShippedConfigsLetTheServiceAnswerLate(t *testing.T) {
	maxWait := service.DefaultConfig().MaxWait
	for _, conf := range []struct {
		path  string
		users []string
	}{{rolestest.AccountsConf(), rolestest.Users}, {rolestest.TenantsConf(), rolestest.TenantsConfUsers()}} {
		for _, u := range conf.users {
			t.Setenv(rolestest.PasswordVar(u), "x")
		}
		opts, err := server.ProcessConfigFile(conf.path)
		if err != nil {
			t.Fatalf("%s: %v", conf.path, err)
		}
		found := false
		for _, u := range opts.Users {
			if u.Username != "api" {
				continue
			}
			found = true
			if r := u.Permissions.Response; r == nil || r.Expires < maxWait {
				t.Errorf("%s: the api user may answer for %+v; the service answers up to %s later", conf.path, r, maxWait)
			}
		}
		if !found {
			t.Errorf("%s has no api user", conf.path)
		}
		for _, acc := range opts.Accounts {
			if acc.Name != "COMPACTOR" {
				continue
			}
			for _, subj := range []string{"compactor.*.compact", "chat.*.*.msg"} {
				d, err := acc.ServiceExportResponseThreshold(subj)
				if conf.path == rolestest.AccountsConf() {
					continue // no exports
				}
				if err != nil || d < maxWait {
					t.Errorf("%s: export %s keeps the way back %s (%v); the service answers up to %s later", conf.path, subj, d, err, maxWait)
				}
			}
		}
	}
}
