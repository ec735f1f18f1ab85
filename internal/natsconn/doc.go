// Package natsconn is how every Compactor process connects to NATS: the one connection
// layer of `compactor serve` and the client commands.
//
// [Connect] and [ConnectRetrying] dial with reconnects forever and errors that never
// hold a URL's password; [Unreachable] and [Refused] tell a server that is away from
// one that refused the credentials or TLS. [Auth] is the ways to authenticate (a
// credentials file, an NKey seed, a token, a user and password) and TLS (a CA, a client
// certificate) with an inbox prefix, checked together by [Auth.Validate].
//
// [Resolve] picks a command's server and credentials from its sources, highest first:
// the caller's own (flags, COMPACTOR_NATS_* variables), then the nats CLI's NATS_*
// variables and its contexts (named, NATS_CONTEXT, or the selected one). Every error
// names each setting by the source it came from.
package natsconn
