package rolestest

import "testing"

// TenantsConf is the path of deploy/nats/tenants.conf, tested as it ships.
func TenantsConf() string { return deployFile("tenants.conf") }

// Tenants are the example tenants of tenants.conf.
var Tenants = []string{"acme", "globex"}

// CompactorUsers are the users of tenants.conf's COMPACTOR account, and SYS's: each
// tenant's own proxy user (<tenant>-proxy) too.
var CompactorUsers = []string{"sys", "admin", "trigger", "worker", "api", "proxy", "acme-proxy", "globex-proxy"}

// TenantUsers returns the users of tenant t's account: <t>-producer and <t>-reader.
func TenantUsers(t string) []string { return []string{t + "-producer", t + "-reader"} }

// TenantsConfUsers returns every user of tenants.conf.
func TenantsConfUsers() []string {
	users := append([]string(nil), CompactorUsers...)
	for _, t := range Tenants {
		users = append(users, TenantUsers(t)...)
	}
	return users
}

// TenantsServer starts a nats-server from tenants.conf as it ships, with a fresh
// password for each of its users.
func TenantsServer(t testing.TB) *Running {
	t.Helper()
	return Start(t, TenantsConf(), TenantsConfUsers())
}
