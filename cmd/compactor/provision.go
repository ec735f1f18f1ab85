package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/internal/natsconn"
	"github.com/compactor/compactor/internal/tenants"
	"github.com/compactor/compactor/jetstream"
)

// defaultProvisionTimeout is how long provision waits for NATS and JetStream: long
// enough for a cluster started with it to elect its leaders, short enough that a Job
// that cannot succeed fails while someone still looks at it.
const defaultProvisionTimeout = 2 * time.Minute

// provisionStatusTimeout bounds the read-back of what exists once provisioning is done.
const provisionStatusTimeout = 30 * time.Second

var provisionCommand = &command{
	name: "provision", conn: explicitConn, interruptible: true,
	summary: "create the streams, buckets and consumers serve would, print what exists and exit",
	about: `A one-shot for deployments where the roles may not create streams (deploy/nats: only
admin may): run it once as that user, before or while the roles start, and again for an
upgrade. It provisions with the settings serve would (the same COMPACTOR_ variables):
missing streams, buckets and consumers are created; existing ones are never changed: a
setting that differs exits 2, naming it, unless --update-streams (or
COMPACTOR_UPDATE_STREAMS=true) applies it on purpose. Running it again changes nothing.

It needs the server: COMPACTOR_NATS_URL or -s/--server (it starts no embedded server).
While NATS cannot be reached or JetStream is not ready (a cluster electing its leader),
it retries as serve does, for up to --timeout: then it exits 7 when NATS never answered,
6 when JetStream did not get ready. A user without the right to create what is missing
exits 2 at the first permissions violation, naming the subject.

Like serve, it connects with its flags and the COMPACTOR_NATS_* variables only, never
NATS_URL or a nats CLI context.`,
	define: func(fs *flagSet) func(context.Context, *call) error {
		update := fs.Bool("update-streams", "", "apply this process's settings to existing streams, buckets and consumers whose settings differ")
		timeout := fs.Duration("timeout", "D", "wait up to D for NATS and JetStream to be ready (default 2m)")
		*timeout = defaultProvisionTimeout
		asJSON := fs.JSON()
		return func(ctx context.Context, c *call) error {
			if len(c.args) > 0 {
				return usagef("provision takes no arguments, got %s", strings.Join(quoteAll(c.args), " "))
			}
			if *timeout <= 0 {
				return usagef("--timeout must be positive, got %s", *timeout)
			}
			env, err := c.loadEnv()
			if err != nil {
				return err
			}
			conn, err := resolveConnection(env, c.conn, false)
			if err != nil {
				return err
			}
			if conn.Local {
				return usagef("provision needs the NATS server to provision: set COMPACTOR_NATS_URL or -s/--server " +
					"(it starts no embedded server; serve provisions its own)")
			}
			if *update {
				env.UpdateStreams = true
			}
			return provision(ctx, c, env, conn, *timeout, *asJSON)
		}
	},
}

// permissionDenied is the cause provision's context gets from the first permissions
// violation the server reports: the request it refused gets no answer, so without it
// provision would only time out.
type permissionDenied struct{ err error }

func (p permissionDenied) Error() string { return p.err.Error() }
func (p permissionDenied) Unwrap() error { return p.err }

// provisionReport is what provision prints: the server and what exists there now.
type provisionReport struct {
	Server string `json:"server"`
	// Tenant is the tenant whose streams these are ("": the deployment's own).
	Tenant string `json:"tenant,omitempty"`
	jetstream.Status
}

func provision(ctx context.Context, c *call, env Env, conn *natsconn.Connection, timeout time.Duration, asJSON bool) error {
	log := newLogger(env, c.std.err)
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	pctx, deny := context.WithCancelCause(tctx)
	defer deny(nil)
	onErr := nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			deny(permissionDenied{err})
			return
		}
		ev := log.Error().Err(err)
		if sub != nil {
			ev = ev.Str("subject", sub.Subject)
		}
		ev.Msg("nats async error")
	})
	nc, err := natsconn.ConnectRetrying(pctx, conn.URL, "compactor-provision", jetstream.DefaultBackoff(), log,
		append(conn.Options(), onErr)...)
	switch {
	case err != nil && ctx.Err() != nil:
		return err // run words it as interrupted
	case err != nil && natsconn.Unreachable(err):
		return newError(errUnavailable, err, "cannot reach NATS at %s within %s (--timeout): %v; check that it runs and that the URL is right",
			conn.Describe(), timeout, err)
	case err != nil:
		return connectionError(conn, err)
	}
	defer nc.Close()

	targets, err := provisionTargets(env)
	if err != nil {
		return err
	}
	var reports []provisionReport
	for _, tg := range targets {
		st, err := jetstream.ProvisionRetrying(pctx, nc, tg.cfg, jetstream.DefaultBackoff(), log)
		if err != nil {
			return provisionError(ctx, tctx, pctx, conn, timeout, tg.what(), err)
		}
		sctx, scancel := context.WithTimeout(pctx, provisionStatusTimeout)
		reports = append(reports, provisionReport{Server: natsconn.RedactURL(conn.URL), Tenant: tg.cfg.Tenant, Status: st.Status(sctx)})
		scancel()
	}
	if asJSON {
		if len(reports) == 1 && env.TenantsFile == "" {
			err = writeJSON(c.std.out, reports[0])
		} else {
			err = writeJSON(c.std.out, reports)
		}
	} else {
		for i, r := range reports {
			if i > 0 {
				fmt.Fprintln(c.std.out)
			}
			if r.Tenant == "" {
				fmt.Fprintf(c.std.out, "provisioned NATS at %s\n\n", conn.Describe())
			} else {
				fmt.Fprintf(c.std.out, "provisioned tenant %s at NATS %s\n\n", r.Tenant, conn.Describe())
			}
			if err = writePipelineStatus(c.std.out, r.Status); err != nil {
				break
			}
		}
	}
	if err != nil {
		return err
	}
	for _, r := range reports {
		if err := readBackError(r.Status); err != nil {
			return err
		}
	}
	return nil
}

// provisionTarget is one layout provision makes: the deployment's own, or a tenant's.
type provisionTarget struct{ cfg jetstream.Config }

func (t provisionTarget) what() string {
	if t.cfg.Tenant == "" {
		return "the deployment's streams"
	}
	return "tenant " + t.cfg.Tenant + "'s streams"
}

// provisionTargets are the layouts provision makes: with COMPACTOR_TENANTS_FILE, every
// tenant's (with its quotas), or only COMPACTOR_TENANT's when that is set too; else the
// deployment's own, or COMPACTOR_TENANT's (without a file: no quotas).
func provisionTargets(env Env) ([]provisionTarget, error) {
	if env.TenantsFile == "" {
		return []provisionTarget{{cfg: env.jetstream()}}, nil
	}
	f, err := tenants.Read(env.TenantsFile)
	if err != nil {
		return nil, newError(errConfig, err, "configuration: COMPACTOR_TENANTS_FILE: %v", err)
	}
	names := f.Names()
	if env.Tenant != "" {
		if _, ok := f.Tenants[env.Tenant]; !ok {
			return nil, newError(errConfig, nil, "configuration: COMPACTOR_TENANT %q is not a tenant of %s (tenants: %s)",
				env.Tenant, env.TenantsFile, strings.Join(names, ", "))
		}
		names = []string{env.Tenant}
	}
	base := env.settings().JetStream()
	var out []provisionTarget
	for _, name := range names {
		cfg, err := f.Tenants[name].JetStream(base, name)
		if err != nil {
			return nil, newError(errConfig, err, "configuration: tenant %q: %v", name, err)
		}
		out = append(out, provisionTarget{cfg: cfg})
	}
	return out, nil
}

// provisionError says what a failed provisioning of what means and what to do.
func provisionError(ctx, tctx, pctx context.Context, conn *natsconn.Connection, timeout time.Duration, what string, err error) error {
	var denied permissionDenied
	switch {
	case errors.As(context.Cause(pctx), &denied):
		return newError(errConfig, denied, "NATS at %s refused what provisioning %s asked: %v; provision as a user that may create "+
			"and change the streams, buckets and consumers (admin in deploy/nats/accounts.conf), and check its inbox prefix "+
			"(COMPACTOR_NATS_INBOX_PREFIX) against the subjects it may subscribe to", conn.Describe(), what,
			strings.TrimPrefix(denied.err.Error(), nats.ErrPermissionViolation.Error()+": "))
	case errors.Is(err, jetstream.ErrConflict):
		return newError(errConfig, err, "%s: %v", what, conflictError(err, "provision"))
	case ctx.Err() != nil:
		return err
	case tctx.Err() != nil:
		return newError(errTimeout, err, "JetStream at %s was not ready within %s (--timeout): %v", conn.Describe(), timeout, err)
	default:
		return err
	}
}

// readBackError is an error naming what provision created but could not read back.
func readBackError(s jetstream.Status) error {
	var bad []string
	for _, st := range s.Streams {
		if st.Error != "" {
			bad = append(bad, "stream "+st.Name)
		}
	}
	for _, c := range s.Consumers {
		if c.Error != "" {
			bad = append(bad, "consumer "+c.Stream+"/"+c.Name)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("provisioned, but could not read back %s (see their errors above)", strings.Join(bad, ", "))
}
