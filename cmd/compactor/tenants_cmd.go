package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/internal/tenants"
	"github.com/compactor/compactor/jetstream"
)

// tenantReadTimeout bounds the reads of one tenant's figures.
const tenantReadTimeout = 10 * time.Second

var tenantsCommand = &command{
	name: "tenants", conn: fullConn, interruptible: true,
	summary: "every tenant of COMPACTOR_TENANTS_FILE: conversations, bytes and tokens today against its quotas, its backlog",
	about: `For the operator of a deployment that serves tenants (docs/tenants.md), run in
Compactor's own account: one line per tenant of COMPACTOR_TENANTS_FILE with the
conversations it holds, the bytes of its chat messages and the summarizer tokens it used
today (UTC), each beside its quota ("-": none), and the compaction requests in its work
queue. A tenant whose streams cannot be read says why (not provisioned yet: compactor
provision). Exit 1 when any tenant could not be read. COMPACTOR_TENANT=<tenant> compactor
status shows one tenant's streams and consumers.`,
	define: func(fs *flagSet) func(context.Context, *call) error {
		asJSON := fs.JSON()
		return func(ctx context.Context, c *call) error {
			if len(c.args) > 0 {
				return usagef("tenants takes no arguments")
			}
			env, err := c.loadEnv()
			if err != nil {
				return err
			}
			if env.TenantsFile == "" {
				return usagef("tenants lists the tenants of COMPACTOR_TENANTS_FILE, which is not set")
			}
			f, err := tenants.Read(env.TenantsFile)
			if err != nil {
				return newError(errConfig, err, "configuration: COMPACTOR_TENANTS_FILE: %v", err)
			}
			nc, err := c.connectOnly(env)
			if err != nil {
				return err
			}
			defer nc.Close()
			rows := readTenants(ctx, nc, env, f)
			if *asJSON {
				err = writeJSON(c.std.out, rows)
			} else {
				err = writeTenants(c.std.out, rows)
			}
			if err != nil {
				return err
			}
			for _, r := range rows {
				if r.Error != "" {
					return fmt.Errorf("tenant %s could not be read: %s", r.Tenant, r.Error)
				}
			}
			return nil
		}
	},
}

// connectOnly connects as the client commands do, opening no stream.
func (c *call) connectOnly(env Env) (*nats.Conn, error) {
	nc, _, err := c.dial(env)
	if err != nil {
		return nil, err
	}
	c.watchRefusals(nc)
	return nc, nil
}

// tenantRow is one tenant's figures.
type tenantRow struct {
	Tenant        string         `json:"tenant"`
	Conversations int64          `json:"conversations"`
	StoredBytes   int64          `json:"stored_bytes"`
	TokensToday   int64          `json:"summarizer_tokens_today"`
	Backlog       uint64         `json:"request_backlog"`
	Quotas        tenants.Quotas `json:"quotas"`
	// Error says why the figures could not be read ("": they were).
	Error string `json:"error,omitempty"`
}

// readTenants reads every tenant's figures, each bounded by tenantReadTimeout.
func readTenants(ctx context.Context, nc *nats.Conn, env Env, f *tenants.File) []tenantRow {
	base := env.settings().JetStream()
	var rows []tenantRow
	for _, name := range f.Names() {
		t := f.Tenants[name]
		row := tenantRow{Tenant: name, Quotas: t.Quotas}
		if err := readTenant(ctx, nc, base, name, t, &row); err != nil {
			row.Error = err.Error()
		}
		rows = append(rows, row)
	}
	return rows
}

func readTenant(ctx context.Context, nc *nats.Conn, base jetstream.Config, name string, t tenants.Tenant, row *tenantRow) error {
	ctx, cancel := context.WithTimeout(ctx, tenantReadTimeout)
	defer cancel()
	cfg, err := t.JetStream(base, name)
	if err != nil {
		return err
	}
	st, err := jetstream.Open(ctx, nc, cfg)
	if errors.Is(err, natsjs.ErrStreamNotFound) || errors.Is(err, natsjs.ErrBucketNotFound) {
		return fmt.Errorf("not provisioned (run compactor provision as admin): %w", err)
	}
	if err != nil {
		return err
	}
	state, err := st.ChatState(ctx)
	if err != nil {
		return err
	}
	row.Conversations, row.StoredBytes = state.Conversations, state.Bytes
	if row.TokensToday, _, err = st.TokensUsed(ctx, time.Now()); err != nil {
		return err
	}
	b, err := st.Queue().Backlog(ctx)
	if err != nil {
		return err
	}
	row.Backlog = b.Waiting + b.InProgress
	return nil
}

// writeTenants prints one line per tenant.
func writeTenants(w io.Writer, rows []tenantRow) error {
	quota := func(n int64, show func(int64) string) string {
		if n <= 0 {
			return "-"
		}
		return show(n)
	}
	count := func(n int64) string { return thousands(n) }
	bytes := func(n int64) string { return humanBytes(uint64(n)) }
	table := [][]string{{"TENANT", "CONVERSATIONS", "QUOTA", "STORED", "QUOTA", "TOKENS TODAY", "QUOTA", "BACKLOG", "ERROR"}}
	for _, r := range rows {
		table = append(table, []string{r.Tenant, count(r.Conversations), quota(r.Quotas.Conversations, count),
			bytes(r.StoredBytes), quota(r.Quotas.StoredBytes, bytes), count(r.TokensToday),
			quota(r.Quotas.SummarizerTokensPerDay, count), count(int64(r.Backlog)), r.Error})
	}
	return writeTable(w, table)
}
