// Package rolestest runs the roles of deploy/nats/accounts.conf and the accounts of
// deploy/nats/tenants.conf in tests: an in-process nats-server started from such a file
// as it ships (or a copy a test changes, which Running.NS can reload), with a fresh
// password per user, and connections as its users, through the natsconn.Auth the
// commands use, that keep the permissions violations the server reports to them so a
// test can wait for a refusal as the event it is.
package rolestest
