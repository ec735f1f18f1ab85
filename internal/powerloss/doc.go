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
// The model, kept simple and close to what ext4 and XFS do (in the spirit of Jepsen's
// LazyFS):
//   - fsync or fdatasync of a file makes its content and size durable, and the entry
//     that names it, with its ancestors' entries: a created file appears, a renamed one
//     moves (its old name goes).
//   - A write through a file opened with O_SYNC or O_DSYNC is durable when it returns,
//     as if fsync followed it.
//   - fsync of a directory makes its entries durable as they are: created ones appear
//     (a file whose data was not synced appears empty), renamed ones move (from either
//     directory's sync), unlinked ones go.
//   - Nothing else is durable: not close, not a rename, not an unlink, not a write, not
//     a mode change. An unlinked file that is synced while open has its content written
//     under the name it still has durably.
//   - Syncs are whole: a power loss falls between two operations, never inside one
//     (no torn writes), and the backing directory itself is not crash-tested.
//
// Options.StrictDirectories keeps only POSIX's promise instead: a file's fsync makes
// its content durable but not the entry that names it, which needs its directory's
// fsync (and that directory's own entry its parent's). Content synced under no durable
// name is dropped at the power loss, as a file system check would.
//
// Hard links, symbolic links, RENAME_EXCHANGE and extended attributes are not
// supported; locks are the kernel's own (local to the mount).
//
// # The tests
//
// The shipped embedded server (embedded.Start with the default Config, which syncs
// every write) runs in a child process with its data directory on the layer;
// Compactor's streams are provisioned (jetstream.Provision, default config) and four
// publishers send conversation messages through pipeline.Client, recording each
// acknowledged one. Once 160 are acknowledged (64 KiB each, so CHAT starts a second
// 8 MiB block), the power fails while they still publish: the layer drops what was not
// synced, the child is killed with SIGKILL. A server restarted on the backing directory
// must hold every message acknowledged before the cut, with its content
// (TestAcknowledgedSurvivesPowerLoss). With SyncInterval at nats-server's default (2
// minutes) every acknowledged message is lost though the streams were written back
// (TestAcknowledgedLostWithoutSync): the layer drops what it should, and the first
// test can fail. TestShippedConfigSurvivesPowerLoss does the same with a nats-server
// built at go.mod's version running deploy/nats/accounts.conf, and
// TestShippedConfigLostWithoutSync with that file less its sync_interval. Under the
// strict POSIX model nats-server loses the newest block's messages (it never syncs the
// directory that names a new block file): TestStrictDirectoriesLoseTheNewestBlock
// shows it, so the promise holds on file systems that make a new file's entry durable
// with its fsync (ext4, XFS), not on every POSIX one.
package powerloss
