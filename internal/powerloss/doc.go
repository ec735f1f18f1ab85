// Package powerloss is a FUSE file system that loses what was not synced, as a
// machine does when its power fails, and the tests that put a JetStream server on it.
//
// # The layer
//
// Mount puts the layer over a backing directory (github.com/hanwen/go-fuse/v2,
// mounted with mount(2) itself, so as root and without the fusermount binary). Every
// write and every change of a name (create, mkdir, rename, truncate, unlink, rmdir)
// stays in memory, the page cache, until it is synced; only a sync writes to the
// backing directory. PowerOff is the power loss: from then on every operation fails
// with EIO and nothing more reaches the backing directory, which holds exactly what
// was synced. A server restarted on the backing directory sees what it would see after
// the machine came back.
//
// The model, kept simple and close to what ext4 does (in the spirit of Jepsen's
// LazyFS):
//   - fsync or fdatasync of a file makes its content and size durable, and the entry
//     that names it, with its ancestors' entries: a created file appears, a renamed one
//     moves (its old name goes).
//   - A write through a file opened with O_SYNC or O_DSYNC is durable when it returns,
//     as if fsync followed it.
//   - fsync of a directory makes its entries durable as they are: created ones appear
//     (a file whose data was not synced appears empty), renamed ones move, unlinked ones
//     go.
//   - Nothing else is durable: not close, not a rename, not an unlink, not a write, not
//     a mode change. An unlinked file that is synced while open has its content written
//     under the name it still has durably.
//   - Syncs are whole: a power loss falls between two operations, never inside one
//     (no torn writes), and the backing directory itself is not crash-tested.
//
// Hard links, symbolic links, RENAME_EXCHANGE and extended attributes are not
// supported; locks are the kernel's own (local to the mount).
//
// # The test
//
// TestAcknowledgedSurvivesPowerLoss starts the shipped embedded server (embedded.Start
// with the default Config, which syncs every write) in a child process with its data
// directory on the layer, provisions Compactor's streams, publishes conversation
// messages through pipeline.Client and records each acknowledged one. Then the power
// fails: the layer drops what was not synced and the child is killed with SIGKILL (no
// shutdown, no final flush). A server restarted on the backing directory must return
// every acknowledged message with its content. The same run with SyncInterval set to
// nats-server's default (2 minutes) must lose acknowledged messages: the test asserts
// the loss, which shows the layer drops what it should and the first assertion can
// fail. TestShippedConfigSurvivesPowerLoss does the same with a nats-server binary built
// from go.mod's version running deploy/nats/accounts.conf.
package powerloss
