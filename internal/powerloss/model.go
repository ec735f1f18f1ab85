package powerloss

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"
)

// node is a file or directory as the processes above the mount see it (its live
// state, the page cache) and as it survives a power loss (its durable state, the
// backing directory).
type node struct {
	id   uint64
	dir  bool
	mode uint32 // permission bits

	// Live state.
	data   []byte           // a file's content
	kids   map[string]*node // a directory's entries
	parent *node            // nil for the root and for a node no entry names
	name   string
	mtime  time.Time

	// Durable state: where the node's synced content is in the backing directory.
	durable bool             // an entry of the backing directory names it (the root always)
	dparent *node            // the directory whose durable entry names it
	dname   string           // that entry's name
	stash   string           // set while a commit moves it aside (see commitLink)
	dkids   map[string]*node // a directory's durable entries
	dsize   int64            // a durable file's size in the backing directory

	// The bytes of data that differ from the durable content: [lo, hi).
	lo, hi int64
}

func (n *node) dirty(lo, hi int64) {
	n.lo = min(n.lo, lo)
	n.hi = max(n.hi, hi)
}

func (n *node) clean() { n.lo, n.hi = math.MaxInt64, 0 }

// model is the whole file system: the live tree, the durable tree and the backing
// directory that holds the durable one. One mutex orders every operation, so a power
// loss falls between two of them.
type model struct {
	mu      sync.Mutex
	backing string
	root    *node
	nextID  uint64
	off     bool // after the power loss: every operation fails with EIO
	strict  bool // entries are durable only when their directory is synced
	stashes int
	orphans map[*node]bool // nodes with durable content that no durable entry names
}

var errOff = errors.New("powerloss: the power is off")

// newModel loads the backing directory: what it holds is both live and durable.
func newModel(backing string, strict bool) (*model, error) {
	abs, err := filepath.Abs(backing)
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("powerloss: backing directory: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("powerloss: backing %s is not a directory", abs)
	}
	m := &model{backing: abs, nextID: 1, strict: strict, orphans: map[*node]bool{}}
	m.root = m.newNode(true, uint32(fi.Mode().Perm()))
	m.root.durable = true
	if err := m.load(m.root, abs); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *model) newNode(dir bool, mode uint32) *node {
	m.nextID++
	n := &node{id: m.nextID, dir: dir, mode: mode & 0o7777, mtime: time.Now(), dsize: -1}
	n.clean()
	if dir {
		n.kids = map[string]*node{}
		n.dkids = map[string]*node{}
	}
	return n
}

func (m *model) load(d *node, path string) error {
	ents, err := os.ReadDir(path)
	if err != nil {
		return err
	}
	for _, e := range ents {
		p := filepath.Join(path, e.Name())
		fi, err := e.Info()
		if err != nil {
			return err
		}
		switch {
		case fi.IsDir():
			n := m.newNode(true, uint32(fi.Mode().Perm()))
			if err := m.load(n, p); err != nil {
				return err
			}
			m.adopt(d, e.Name(), n)
		case fi.Mode().IsRegular():
			n := m.newNode(false, uint32(fi.Mode().Perm()))
			if n.data, err = os.ReadFile(p); err != nil {
				return err
			}
			n.dsize = int64(len(n.data))
			m.adopt(d, e.Name(), n)
		default:
			return fmt.Errorf("powerloss: %s is neither a file nor a directory", p)
		}
	}
	return nil
}

// adopt links a node loaded from the backing directory, live and durable alike.
func (m *model) adopt(d *node, name string, n *node) {
	n.parent, n.name = d, name
	n.durable, n.dparent, n.dname = true, d, name
	d.kids[name] = n
	d.dkids[name] = n
}

// bpath is where n's durable content is in the backing directory.
func (m *model) bpath(n *node) string {
	if n == m.root {
		return m.backing
	}
	if n.stash != "" {
		return n.stash
	}
	return filepath.Join(m.bpath(n.dparent), n.dname)
}

// powerOff drops what was not synced: from now on every operation fails and nothing
// more reaches the backing directory. Synced content that no durable entry names is
// gone too, as a file system check after the crash would remove it.
func (m *model) powerOff() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.off {
		return nil
	}
	m.off = true
	var errs []error
	for n := range m.orphans {
		errs = append(errs, os.RemoveAll(n.stash))
	}
	return errors.Join(errs...)
}

// Live operations: they change only the live tree.

func (m *model) lookup(d *node, name string) (*node, error) {
	if m.off {
		return nil, errOff
	}
	n := d.kids[name]
	if n == nil {
		return nil, syscall.ENOENT
	}
	return n, nil
}

func (m *model) create(d *node, name string, dir bool, mode uint32) (*node, error) {
	if m.off {
		return nil, errOff
	}
	if d.kids[name] != nil {
		return nil, syscall.EEXIST
	}
	n := m.newNode(dir, mode)
	n.parent, n.name = d, name
	d.kids[name] = n
	d.mtime = time.Now()
	return n, nil
}

func (m *model) write(n *node, p []byte, off int64) error {
	if m.off {
		return errOff
	}
	if n.dir {
		return syscall.EISDIR
	}
	end := off + int64(len(p))
	if end > int64(len(n.data)) {
		n.dirty(int64(len(n.data)), end)
		n.data = append(n.data, make([]byte, end-int64(len(n.data)))...)
	}
	copy(n.data[off:], p)
	n.dirty(off, end)
	n.mtime = time.Now()
	return nil
}

func (m *model) truncate(n *node, size int64) error {
	if m.off {
		return errOff
	}
	if n.dir {
		return syscall.EISDIR
	}
	old := int64(len(n.data))
	switch {
	case size < old:
		n.data = n.data[:size]
		n.dirty(size, size)
	case size > old:
		n.data = append(n.data, make([]byte, size-old)...)
		n.dirty(old, size)
	}
	n.mtime = time.Now()
	return nil
}

func (m *model) read(n *node, p []byte, off int64) (int, error) {
	if m.off {
		return 0, errOff
	}
	if off >= int64(len(n.data)) {
		return 0, nil
	}
	return copy(p, n.data[off:]), nil
}

// unlink removes an entry; rmdir says whether it must name an empty directory.
func (m *model) unlink(d *node, name string, rmdir bool) error {
	if m.off {
		return errOff
	}
	n := d.kids[name]
	switch {
	case n == nil:
		return syscall.ENOENT
	case rmdir && !n.dir:
		return syscall.ENOTDIR
	case !rmdir && n.dir:
		return syscall.EISDIR
	case rmdir && len(n.kids) > 0:
		return syscall.ENOTEMPTY
	}
	delete(d.kids, name)
	n.parent = nil
	d.mtime = time.Now()
	return nil
}

func (m *model) rename(d *node, name string, nd *node, newName string, noReplace bool) error {
	if m.off {
		return errOff
	}
	n := d.kids[name]
	if n == nil {
		return syscall.ENOENT
	}
	for a := nd; a != nil; a = a.parent {
		if a == n {
			return syscall.EINVAL // into itself
		}
	}
	if old := nd.kids[newName]; old != nil && old != n {
		switch {
		case noReplace:
			return syscall.EEXIST
		case old.dir && !n.dir:
			return syscall.EISDIR
		case !old.dir && n.dir:
			return syscall.ENOTDIR
		case old.dir && len(old.kids) > 0:
			return syscall.ENOTEMPTY
		}
		old.parent = nil
	}
	delete(d.kids, name)
	nd.kids[newName] = n
	n.parent, n.name = nd, newName
	d.mtime, nd.mtime = time.Now(), time.Now()
	return nil
}

func (m *model) names(d *node) ([]string, error) {
	if m.off {
		return nil, errOff
	}
	out := make([]string, 0, len(d.kids))
	for name := range d.kids {
		out = append(out, name)
	}
	sort.Strings(out)
	return out, nil
}

// fsync makes n durable as the package doc says: a file's content, a directory's
// entries, and (unless strict) the entries that name n and its ancestors.
func (m *model) fsync(n *node) error {
	if m.off {
		return errOff
	}
	var err error
	if m.strict {
		err = m.place(n)
	} else {
		err = m.commitLink(n)
	}
	if err != nil {
		return err
	}
	if n.dir {
		return m.commitEntries(n)
	}
	return m.commitData(n)
}

// hasPlace reports whether d is somewhere in the backing directory, named or not.
func (m *model) hasPlace(d *node) bool { return d == m.root || d.durable }

// place gives a node that has no durable content yet a place of its own in the backing
// directory, which no entry names (an orphan, strict mode): what is synced of it is
// kept there until an entry that names it is durable, and is lost with the power
// otherwise.
func (m *model) place(n *node) error {
	if n.durable {
		return nil
	}
	path := m.newStash()
	if n.dir {
		if err := os.Mkdir(path, 0o700); err != nil {
			return err
		}
	} else {
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			return err
		}
		n.dsize = 0
		n.dirty(0, int64(len(n.data)))
	}
	n.durable, n.stash = true, path
	m.orphans[n] = true
	return nil
}

func (m *model) newStash() string {
	m.stashes++
	return filepath.Join(m.backing, fmt.Sprintf(".powerloss-stash-%d", m.stashes))
}

// stashAway moves a durable node out of the entry that names it to a place of its own.
func (m *model) stashAway(n *node) error {
	path := m.newStash()
	if err := os.Rename(m.bpath(n), path); err != nil {
		return err
	}
	if n.stash == "" {
		delete(n.dparent.dkids, n.dname)
	}
	n.stash, n.dparent, n.dname = path, nil, ""
	m.orphans[n] = true
	return nil
}

// commitLink makes the live entry that names n durable, with its ancestors' entries:
// a created node appears in the backing directory, a renamed one moves there. A node
// no entry names keeps the durable entry it has (an unlink is durable only when its
// directory is synced).
func (m *model) commitLink(n *node) error {
	if n == m.root || n.parent == nil {
		return nil
	}
	if err := m.commitLink(n.parent); err != nil {
		return err
	}
	return m.link(n)
}

// relink makes durable the live entry of a node whose durable entry went: with its
// ancestors', or, strict, only when its directory has a place.
func (m *model) relink(n *node) error {
	if !m.strict {
		return m.commitLink(n)
	}
	if n.parent != nil && m.hasPlace(n.parent) {
		return m.link(n)
	}
	return nil
}

// link makes the live entry that names n durable in its directory, which has a place.
func (m *model) link(n *node) error {
	if n.durable && n.stash == "" && n.dparent == n.parent && n.dname == n.name {
		return nil
	}
	d := n.parent
	dst := filepath.Join(m.bpath(d), n.name)
	// The durable entry this one replaces: a node that lives on under another name is
	// moved aside and linked there after, as one rename would move it; any other is
	// gone.
	var moved *node
	if old := d.dkids[n.name]; old != nil && old != n {
		if old.parent != nil {
			if err := m.stashAway(old); err != nil {
				return err
			}
			moved = old
		} else if err := m.dropDurable(old); err != nil {
			return err
		}
	}
	switch {
	case n.durable:
		if err := os.Rename(m.bpath(n), dst); err != nil {
			return err
		}
		if n.stash == "" {
			delete(n.dparent.dkids, n.dname)
		}
		delete(m.orphans, n)
		n.stash = ""
	case n.dir:
		if err := os.Mkdir(dst, fs.FileMode(n.mode)|0o700); err != nil {
			return err
		}
	default:
		if err := os.WriteFile(dst, nil, fs.FileMode(n.mode)|0o600); err != nil {
			return err
		}
		n.dsize = 0
		n.dirty(0, int64(len(n.data)))
	}
	n.durable, n.dparent, n.dname = true, d, n.name
	d.dkids[n.name] = n
	if moved != nil {
		return m.relink(moved)
	}
	return nil
}

// dropDurable removes n's durable entry and content, and its durable descendants'.
func (m *model) dropDurable(n *node) error {
	if err := os.RemoveAll(m.bpath(n)); err != nil {
		return err
	}
	if n.stash == "" {
		delete(n.dparent.dkids, n.dname)
	}
	m.forgetDurable(n)
	return nil
}

func (m *model) forgetDurable(n *node) {
	delete(m.orphans, n)
	n.durable, n.dparent, n.dname, n.stash = false, nil, "", ""
	n.dsize = -1
	n.dirty(0, int64(len(n.data)))
	for _, k := range n.dkids {
		m.forgetDurable(k)
	}
	if n.dir {
		n.dkids = map[string]*node{}
	}
}

// commitEntries makes d's entries durable as they are live: new ones appear, renamed
// ones move, removed ones go (a node that lives on under another name moves there, or,
// strict, to a place of its own unless its directory has one).
func (m *model) commitEntries(d *node) error {
	if !m.hasPlace(d) {
		return nil // an unlinked directory that never was durable
	}
	names := make([]string, 0, len(d.dkids))
	for name := range d.dkids {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		old := d.dkids[name]
		if old == nil || d.kids[name] == old {
			continue
		}
		if old.parent == nil {
			if err := m.dropDurable(old); err != nil {
				return err
			}
			continue
		}
		if err := m.stashAway(old); err != nil {
			return err
		}
		if err := m.relink(old); err != nil {
			return err
		}
	}
	for _, n := range d.kids {
		if err := m.link(n); err != nil {
			return err
		}
	}
	return nil
}

// commitData writes a file's changed bytes to its durable content. A file no durable
// entry names has none: its data is lost with the power.
func (m *model) commitData(n *node) error {
	if !n.durable || n.lo >= n.hi && n.dsize == int64(len(n.data)) {
		n.clean()
		return nil
	}
	f, err := os.OpenFile(m.bpath(n), os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	size := int64(len(n.data))
	if n.dsize != size {
		if err := f.Truncate(size); err != nil {
			f.Close()
			return err
		}
	}
	if lo, hi := n.lo, min(n.hi, size); lo < hi {
		if _, err := f.WriteAt(n.data[lo:hi], lo); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	n.dsize = size
	n.clean()
	return nil
}

// syncAll syncs d and everything under it.
func (m *model) syncAll(d *node) error {
	if err := m.fsync(d); err != nil {
		return err
	}
	for _, n := range d.kids {
		var err error
		if n.dir {
			err = m.syncAll(n)
		} else {
			err = m.fsync(n)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
