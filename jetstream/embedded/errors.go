package embedded

import "errors"

// ErrDataDirInUse means another process (another compactor with its embedded
// nats-server) holds the lock of the data directory. Two servers on one directory
// corrupt each other's JetStream store.
var ErrDataDirInUse = errors.New("data dir is in use")
