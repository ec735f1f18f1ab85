// Package rolestest runs the roles of deploy/nats/accounts.conf in tests: an
// in-process nats-server started from that file as it ships, with a fresh password per
// user, and connections as its users, through the natsconn.Auth the commands use, that
// keep the permissions violations the server reports to them.
package rolestest
