package powerloss

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// FS is a mounted power-loss layer over a backing directory.
type FS struct {
	m          *model
	srv        *fuse.Server
	mountpoint string
	unmounted  bool
}

// Options change the layer's model.
type Options struct {
	// StrictDirectories makes a created or renamed entry durable only when its
	// directory is synced, as POSIX promises, not also when the file is (as ext4 does):
	// a file synced in a directory never synced is lost with the power.
	StrictDirectories bool
}

// Mount mounts the layer over backing at mountpoint (both existing directories). It
// mounts with mount(2) itself (root, or CAP_SYS_ADMIN, and /dev/fuse), never through
// the fusermount binary. What backing holds when it mounts is both live and durable.
func Mount(backing, mountpoint string, o Options) (*FS, error) {
	m, err := newModel(backing, o.StrictDirectories)
	if err != nil {
		return nil, err
	}
	timeout := time.Second
	root := &fnode{m: m, n: m.root}
	srv, err := fs.Mount(mountpoint, root, &fs.Options{
		EntryTimeout: &timeout,
		AttrTimeout:  &timeout,
		MountOptions: fuse.MountOptions{
			FsName:            "powerloss",
			Name:              "powerloss",
			DirectMountStrict: true,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("powerloss: mount %s: %w", mountpoint, err)
	}
	return &FS{m: m, srv: srv, mountpoint: mountpoint}, nil
}

// PowerOff is the power loss: what was not synced is dropped, and from now on every
// operation on the mount fails with EIO, so nothing more reaches the backing
// directory. It does not unmount: end the processes that use the mount, then Unmount.
// An error says that the backing directory could not be cleaned of content synced
// under no durable name (strict mode).
func (f *FS) PowerOff() error { return f.m.powerOff() }

// Sync writes everything back to the backing directory, as sync(2) does.
func (f *FS) Sync() error {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	return f.m.syncAll(f.m.root)
}

// Unmount unmounts the layer without writing anything more to the backing directory.
// A mount still in use is detached (lazily unmounted) after a few tries.
func (f *FS) Unmount() error {
	if f.unmounted {
		return nil
	}
	f.unmounted = true
	var err error
	for range 20 {
		if err = f.srv.Unmount(); err == nil {
			f.srv.Wait()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	if derr := syscall.Unmount(f.mountpoint, syscall.MNT_DETACH); derr != nil {
		return fmt.Errorf("powerloss: unmount %s: %w (detach: %v)", f.mountpoint, err, derr)
	}
	f.srv.Wait()
	return nil
}

// fnode is a node of the mount: the FUSE side of a model node.
type fnode struct {
	fs.Inode
	m *model
	n *node
}

// handle is an open file; it remembers the open flags for O_SYNC and O_DSYNC.
type handle struct{ flags uint32 }

var (
	_ fs.NodeLookuper  = (*fnode)(nil)
	_ fs.NodeGetattrer = (*fnode)(nil)
	_ fs.NodeSetattrer = (*fnode)(nil)
	_ fs.NodeOpener    = (*fnode)(nil)
	_ fs.NodeCreater   = (*fnode)(nil)
	_ fs.NodeMkdirer   = (*fnode)(nil)
	_ fs.NodeUnlinker  = (*fnode)(nil)
	_ fs.NodeRmdirer   = (*fnode)(nil)
	_ fs.NodeRenamer   = (*fnode)(nil)
	_ fs.NodeReaddirer = (*fnode)(nil)
	_ fs.NodeReader    = (*fnode)(nil)
	_ fs.NodeWriter    = (*fnode)(nil)
	_ fs.NodeFsyncer   = (*fnode)(nil)
	_ fs.NodeFlusher   = (*fnode)(nil)
	_ fs.NodeStatfser  = (*fnode)(nil)
)

func errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	if errors.Is(err, errOff) {
		return syscall.EIO
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return syscall.EIO
}

func attr(n *node, a *fuse.Attr) {
	a.Ino = n.id
	a.Mode = n.mode | syscall.S_IFREG
	a.Nlink = 1
	if n.dir {
		a.Mode = n.mode | syscall.S_IFDIR
		a.Nlink = 2
	}
	a.Size = uint64(len(n.data))
	a.Blocks = (a.Size + 511) / 512
	a.Blksize = 4096
	a.SetTimes(nil, &n.mtime, &n.mtime)
}

func (f *fnode) child(ctx context.Context, n *node, out *fuse.EntryOut) *fs.Inode {
	attr(n, &out.Attr)
	mode := uint32(syscall.S_IFREG)
	if n.dir {
		mode = syscall.S_IFDIR
	}
	return f.NewInode(ctx, &fnode{m: f.m, n: n}, fs.StableAttr{Mode: mode, Ino: n.id})
}

func (f *fnode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	n, err := f.m.lookup(f.n, name)
	if err != nil {
		return nil, errno(err)
	}
	return f.child(ctx, n, out), 0
}

func (f *fnode) Getattr(ctx context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if f.m.off {
		return syscall.EIO
	}
	attr(f.n, &out.Attr)
	return 0
}

func (f *fnode) Setattr(ctx context.Context, _ fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if f.m.off {
		return syscall.EIO
	}
	if size, ok := in.GetSize(); ok {
		if err := f.m.truncate(f.n, int64(size)); err != nil {
			return errno(err)
		}
	}
	if mode, ok := in.GetMode(); ok {
		f.n.mode = mode & 0o7777 // live only: a mode change is not modeled as durable
	}
	if mtime, ok := in.GetMTime(); ok {
		f.n.mtime = mtime
	}
	attr(f.n, &out.Attr)
	return 0
}

func (f *fnode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if f.m.off {
		return nil, 0, syscall.EIO
	}
	if flags&syscall.O_TRUNC != 0 {
		if err := f.m.truncate(f.n, 0); err != nil {
			return nil, 0, errno(err)
		}
	}
	return &handle{flags: flags}, fuse.FOPEN_DIRECT_IO, 0
}

func (f *fnode) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	n, err := f.m.create(f.n, name, false, mode)
	if err != nil {
		return nil, nil, 0, errno(err)
	}
	return f.child(ctx, n, out), &handle{flags: flags}, fuse.FOPEN_DIRECT_IO, 0
}

func (f *fnode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	n, err := f.m.create(f.n, name, true, mode)
	if err != nil {
		return nil, errno(err)
	}
	return f.child(ctx, n, out), 0
}

func (f *fnode) Unlink(ctx context.Context, name string) syscall.Errno {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	return errno(f.m.unlink(f.n, name, false))
}

func (f *fnode) Rmdir(ctx context.Context, name string) syscall.Errno {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	return errno(f.m.unlink(f.n, name, true))
}

func (f *fnode) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	np, ok := newParent.(*fnode)
	if !ok {
		return syscall.EXDEV
	}
	const noReplace = 1 // RENAME_NOREPLACE
	if flags&^noReplace != 0 {
		return syscall.EINVAL // RENAME_EXCHANGE and RENAME_WHITEOUT are not modeled
	}
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	return errno(f.m.rename(f.n, name, np.n, newName, flags&noReplace != 0))
}

func (f *fnode) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	names, err := f.m.names(f.n)
	if err != nil {
		return nil, errno(err)
	}
	ents := make([]fuse.DirEntry, 0, len(names))
	for _, name := range names {
		k := f.n.kids[name]
		mode := uint32(syscall.S_IFREG)
		if k.dir {
			mode = syscall.S_IFDIR
		}
		ents = append(ents, fuse.DirEntry{Name: name, Mode: mode, Ino: k.id})
	}
	return fs.NewListDirStream(ents), 0
}

func (f *fnode) Read(ctx context.Context, _ fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	n, err := f.m.read(f.n, dest, off)
	if err != nil {
		return nil, errno(err)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

func (f *fnode) Write(ctx context.Context, fh fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if err := f.m.write(f.n, data, off); err != nil {
		return 0, errno(err)
	}
	// O_SYNC and O_DSYNC: each write is durable when it returns, as after an fsync.
	if h, ok := fh.(*handle); ok && h.flags&syscall.O_DSYNC != 0 {
		if err := f.m.fsync(f.n); err != nil {
			return 0, errno(err)
		}
	}
	return uint32(len(data)), 0
}

func (f *fnode) Fsync(ctx context.Context, _ fs.FileHandle, flags uint32) syscall.Errno {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	return errno(f.m.fsync(f.n))
}

// Flush is close(2): it makes nothing durable.
func (f *fnode) Flush(ctx context.Context, _ fs.FileHandle) syscall.Errno {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if f.m.off {
		return syscall.EIO
	}
	return 0
}

// Statfs reports the backing directory's file system, so a server checking for free
// space sees the real figures.
func (f *fnode) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	var st syscall.Statfs_t
	if err := syscall.Statfs(f.m.backing, &st); err != nil {
		return errno(err)
	}
	out.FromStatfsT(&st)
	return 0
}

// Available says why a FUSE mount cannot be made here, or nil when it can: /dev/fuse
// must exist and the kernel must know the fuse file system. Mounting also needs root
// (CAP_SYS_ADMIN); Mount reports that.
func Available() error {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return fmt.Errorf("no /dev/fuse: %w", err)
	}
	b, err := os.ReadFile("/proc/filesystems")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[len(f)-1] == "fuse" {
			return nil
		}
	}
	return errors.New("the kernel lists no fuse file system in /proc/filesystems")
}
