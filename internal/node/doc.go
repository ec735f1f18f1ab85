// Package node assembles a Compactor node: the roles one process runs (the trigger,
// the summarizer worker pool, the compactor service and its web view), what telemetry
// observes of them, their start and their drain.
//
// [New] wires the roles over a connection and a provisioned store, and [Node.Run] runs
// them. [Serve] is a whole process's life around that: the operators' listener, traces,
// an embedded NATS server when no URL is given, connecting and provisioning with
// retries, and a drain bounded in time. `compactor serve` is Serve with the
// configuration the command line read; bench, eval and the system tests build their
// nodes with New. It is the only place the roles are wired.
package node
