package embedded

import "errors"

// ErrDataDirInUse means another process (another compactor with its embedded
// nats-server) holds the lock of the data directory. Two servers on one directory
// corrupt each other's JetStream store.
var ErrDataDirInUse = errors.New("data dir is in use")

// ErrListenInUse means the address the embedded server is to listen on is taken
// (another nats-server, another compactor).
var ErrListenInUse = errors.New("listen address is in use")
