package recording

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// FilePrefix and FileTime make the file names of the directory and object stores:
// sessions-<UTC time the file was started>-<4-digit counter>.jsonl[.gz].
// They sort by time, so a reader that walks them in name order reads
// sessions roughly in the order they were recorded.
const (
	FilePrefix = "sessions-"
	FileTime   = "20060102T150405Z"
)

// IsSessionFile reports whether a file or object name is one the directory
// and object stores read: sessions-*.jsonl or sessions-*.jsonl.gz.
func IsSessionFile(name string) bool {
	base := name[strings.LastIndexByte(name, '/')+1:]
	return strings.HasPrefix(base, FilePrefix) &&
		(strings.HasSuffix(base, ".jsonl") || strings.HasSuffix(base, ".jsonl.gz"))
}

// DirStore keeps sessions in a directory of rotated JSONL files, optionally
// gzip-compressed. Several processes may write into one directory: each
// creates its own files. Readers see whole lines once Flush returns.
//
// A file only ever receives whole lines (a gzip file whole gzip members,
// one per write, which readers read as one stream): when a write fails or
// is short (a full disk), the file is cut back to where it was and the
// lines stay buffered, to be written by the next Write or Flush, once
// there is space again; if the file cannot be cut back, the store goes on
// in a new file. Files are created 0600 and the directory 0700 unless
// WithPermissions says otherwise.
type DirStore struct {
	SkipCounter
	dir string
	o   *Settings

	mu       sync.Mutex // guards the current file and the buffer
	f        *os.File
	size     int64  // bytes of f that hold whole lines (or members)
	buf      []byte // whole lines not yet written to f
	line     []byte // scratch for encoding one session
	zbuf     bytes.Buffer
	zw       *gzip.Writer // reused for every member
	bytes    int64        // uncompressed bytes in the current file
	sessions int          // sessions in the current file
	counter  int          // last counter used in a file name
	closed   atomic.Bool

	index dirIndex // for Get
}

var _ Store = (*DirStore)(nil)

// flushAt is the buffer size at which Write hands lines to the file.
const flushAt = 256 << 10

// Default permissions of what a DirStore creates.
const (
	DefaultFileMode os.FileMode = 0o600
	DefaultDirMode  os.FileMode = 0o700
)

// NewDirStore returns a store on the directory dir (created on first write).
func NewDirStore(dir string, opts ...Option) (*DirStore, error) {
	if dir == "" {
		return nil, errors.New("recording: empty directory name")
	}
	return &DirStore{dir: dir, o: NewSettings(opts)}, nil
}

// Dir returns the directory of the store.
func (d *DirStore) Dir() string { return d.dir }

// MkdirAll creates the directory of the store (with the store's directory
// permissions) if it does not exist.
func (d *DirStore) MkdirAll() error {
	if err := os.MkdirAll(d.dir, d.o.DirMode); err != nil {
		return fmt.Errorf("recording: create directory %s: %w", d.dir, err)
	}
	return nil
}

// Write appends the sessions to the current file, rotating first when it is
// full. When it fails after storing some of them it returns a *WriteError
// saying how many; a session it stored is written to the file later even if
// the file cannot take it now.
func (d *DirStore) Write(ctx context.Context, ss []*Session) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed.Load() {
		return errors.New("recording: write to closed directory store")
	}
	if len(d.buf) >= flushAt { // what an earlier Write could not write
		if err := d.writeBuf(); err != nil {
			return err
		}
	}
	for i, s := range ss {
		line, err := AppendMarshal(d.line[:0], s)
		if err != nil {
			return &WriteError{Stored: i, Err: fmt.Errorf("recording: encode session %q: %w: %w", s.ID, ErrRejected, err)}
		}
		d.line = line
		if d.f != nil && d.full(int64(len(line)+1)) {
			if err := d.closeFile(); err != nil {
				return &WriteError{Stored: i, Err: err}
			}
		}
		if d.f == nil {
			if err := d.openFile(); err != nil {
				return &WriteError{Stored: i, Err: err}
			}
		}
		d.buf = append(append(d.buf, line...), '\n')
		d.bytes += int64(len(line) + 1)
		d.sessions++
		if len(d.buf) >= flushAt {
			if err := d.writeBuf(); err != nil {
				return &WriteError{Stored: i + 1, Err: err}
			}
		}
	}
	return nil
}

func (d *DirStore) full(next int64) bool {
	if d.o.RotateSessions > 0 && d.sessions >= d.o.RotateSessions {
		return true
	}
	return d.o.RotateBytes > 0 && d.bytes > 0 && d.bytes+next > d.o.RotateBytes
}

func (d *DirStore) openFile() error {
	if err := d.MkdirAll(); err != nil {
		return err
	}
	ext := ".jsonl"
	if d.o.Gzip {
		ext += ".gz"
	}
	stamp := time.Now().UTC().Format(FileTime)
	for range 10000 {
		d.counter++
		name := filepath.Join(d.dir, fmt.Sprintf("%s%s-%04d%s", FilePrefix, stamp, d.counter, ext))
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, d.o.FileMode)
		if errors.Is(err, fs.ErrExist) {
			continue // another writer (or process) took this name
		}
		if err != nil {
			return fmt.Errorf("recording: create %s: %w", name, err)
		}
		d.f, d.size, d.bytes, d.sessions = f, 0, 0, 0
		return nil
	}
	return fmt.Errorf("recording: no free file name in %s for %s", d.dir, stamp)
}

// writeBuf writes the buffered lines to the file in one write, as they are
// (plain) or as one gzip member. A failed or short write is cut back off
// the file and the lines stay buffered; when the file cannot be cut back it
// is closed as it is (its last line or member incomplete, which readers
// report) and the next write goes to a new file.
func (d *DirStore) writeBuf() error {
	if len(d.buf) == 0 || d.f == nil {
		return nil
	}
	out := d.buf
	if d.o.Gzip {
		d.zbuf.Reset()
		if d.zw == nil {
			d.zw = gzip.NewWriter(&d.zbuf)
		} else {
			d.zw.Reset(&d.zbuf)
		}
		_, _ = d.zw.Write(d.buf) // into memory: cannot fail
		_ = d.zw.Close()
		out = d.zbuf.Bytes()
	}
	n, err := d.f.Write(out)
	if err == nil {
		d.size += int64(n)
		d.buf = d.buf[:0]
		return nil
	}
	name := d.f.Name()
	if n > 0 {
		if terr := d.f.Truncate(d.size); terr != nil {
			_ = d.f.Close()
			d.f = nil // the lines still buffered go to a new file
			return fmt.Errorf("recording: write %s: %w (and cutting it back to %d bytes: %v; going on in a new file)", name, err, d.size, terr)
		}
		if _, serr := d.f.Seek(d.size, io.SeekStart); serr != nil {
			_ = d.f.Close()
			d.f = nil
			return fmt.Errorf("recording: write %s: %w (and seeking back: %v; going on in a new file)", name, err, serr)
		}
	}
	return fmt.Errorf("recording: write %s: %w (%d bytes of sessions kept to write again)", name, err, len(d.buf))
}

func (d *DirStore) closeFile() error {
	if err := d.writeBuf(); err != nil {
		return err
	}
	if d.f == nil {
		return nil
	}
	err := d.f.Close()
	d.f = nil
	if err != nil {
		return fmt.Errorf("recording: close file in %s: %w", d.dir, err)
	}
	return nil
}

// Flush writes buffered sessions to the current file.
func (d *DirStore) Flush(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.f == nil && len(d.buf) > 0 { // the last file was given up
		if err := d.openFile(); err != nil {
			return err
		}
	}
	return d.writeBuf()
}

// Close writes what is buffered and closes the current file. It is safe to
// call twice; a Close that fails to write leaves the store open, so that a
// later Close may write the buffer when there is space.
func (d *DirStore) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed.Load() {
		return nil
	}
	if d.f == nil && len(d.buf) > 0 {
		if err := d.openFile(); err != nil {
			return err
		}
	}
	if err := d.closeFile(); err != nil {
		return err
	}
	d.closed.Store(true)
	return nil
}

// Files returns the session files of the directory in name (time) order. A
// directory that does not exist is an error wrapping fs.ErrNotExist.
func (d *DirStore) Files() ([]string, error) {
	ents, err := os.ReadDir(d.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("recording: %s: no such directory: %w", d.dir, err)
	}
	if err != nil {
		return nil, fmt.Errorf("recording: list %s: %w", d.dir, err)
	}
	var names []string
	for _, e := range ents {
		if e.Type().IsRegular() && IsSessionFile(e.Name()) {
			names = append(names, filepath.Join(d.dir, e.Name()))
		}
	}
	slices.Sort(names)
	return names, nil
}

// Scan reads every session file in name order.
func (d *DirStore) Scan(ctx context.Context, fn func(*Session) error) error {
	files, err := d.Files()
	if err != nil {
		return err
	}
	for _, name := range files {
		if err := d.scanFile(ctx, name, fn); err != nil {
			if errors.Is(err, ErrStop) {
				return nil
			}
			return err
		}
	}
	return nil
}

func (d *DirStore) scanFile(ctx context.Context, name string, fn func(*Session) error) error {
	f, err := os.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // removed since it was listed
	}
	if err != nil {
		return fmt.Errorf("recording: open %s: %w", name, err)
	}
	defer f.Close()
	return ReadJSONL(ctx, name, f, d.o, &d.SkipCounter, fn)
}

// Get returns the session with the id. The first Get indexes the
// directory (ids and line offsets, about 100 bytes per session); later ones
// read one line, and index what was written since when an id is missing.
func (d *DirStore) Get(ctx context.Context, id string) (*Session, error) {
	return d.getIndexed(ctx, id)
}

// GetByScan returns the session with the id by scanning r, for stores
// with no index.
func GetByScan(ctx context.Context, r Reader, id string) (*Session, error) {
	var found *Session
	err := r.Scan(ctx, func(s *Session) error {
		if s.ID == id {
			found = s
			return ErrStop
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if found == nil {
		return nil, fmt.Errorf("%w: id %q", ErrNotFound, id)
	}
	return found, nil
}
