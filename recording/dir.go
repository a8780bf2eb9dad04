package recording

import (
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
// creates its own files. Readers see whole lines once Flush returns (the
// last file of a gzip writer up to its last flush).
type DirStore struct {
	SkipCounter
	dir string
	o   *Settings

	mu       sync.Mutex // guards the current file and the buffer
	f        *os.File
	zw       *gzip.Writer
	w        io.Writer // f or zw
	buf      []byte    // whole lines not yet written to w
	line     []byte    // scratch for encoding one session
	bytes    int64     // uncompressed bytes in the current file
	sessions int       // sessions in the current file
	counter  int       // last counter used in a file name
	closed   closeOnce

	index dirIndex // for Get
}

var _ Store = (*DirStore)(nil)

// flushAt is the buffer size at which Write hands lines to the file, so a
// file only ever receives whole lines in one write.
const flushAt = 256 << 10

// NewDirStore returns a store on the directory dir (created on first write).
func NewDirStore(dir string, opts ...Option) (*DirStore, error) {
	if dir == "" {
		return nil, errors.New("recording: empty directory name")
	}
	return &DirStore{dir: dir, o: NewSettings(opts)}, nil
}

// Dir returns the directory of the store.
func (d *DirStore) Dir() string { return d.dir }

// Write appends the sessions to the current file, rotating first when it is
// full.
func (d *DirStore) Write(ctx context.Context, ss []*Session) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed.done.Load() {
		return errors.New("recording: write to closed directory store")
	}
	for _, s := range ss {
		line, err := AppendMarshal(d.line[:0], s)
		if err != nil {
			return fmt.Errorf("recording: encode session %q: %w: %w", s.ID, ErrRejected, err)
		}
		d.line = line
		if d.f != nil && d.full(int64(len(line)+1)) {
			if err := d.closeFile(); err != nil {
				return err
			}
		}
		if d.f == nil {
			if err := d.openFile(); err != nil {
				return err
			}
		}
		d.buf = append(append(d.buf, line...), '\n')
		d.bytes += int64(len(line) + 1)
		d.sessions++
		if len(d.buf) >= flushAt {
			if err := d.writeBuf(); err != nil {
				return err
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
	if err := os.MkdirAll(d.dir, 0o755); err != nil {
		return fmt.Errorf("recording: create directory %s: %w", d.dir, err)
	}
	ext := ".jsonl"
	if d.o.Gzip {
		ext += ".gz"
	}
	stamp := time.Now().UTC().Format(FileTime)
	for range 10000 {
		d.counter++
		name := filepath.Join(d.dir, fmt.Sprintf("%s%s-%04d%s", FilePrefix, stamp, d.counter, ext))
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, fs.ErrExist) {
			continue // another writer (or process) took this name
		}
		if err != nil {
			return fmt.Errorf("recording: create %s: %w", name, err)
		}
		d.f, d.w, d.bytes, d.sessions = f, f, 0, 0
		if d.o.Gzip {
			d.zw = gzip.NewWriter(f)
			d.w = d.zw
		}
		return nil
	}
	return fmt.Errorf("recording: no free file name in %s for %s", d.dir, stamp)
}

func (d *DirStore) writeBuf() error {
	if len(d.buf) == 0 {
		return nil
	}
	_, err := d.w.Write(d.buf)
	d.buf = d.buf[:0]
	if err != nil {
		return fmt.Errorf("recording: write %s: %w", d.f.Name(), err)
	}
	return nil
}

func (d *DirStore) flushLocked() error {
	if d.f == nil {
		return nil
	}
	if err := d.writeBuf(); err != nil {
		return err
	}
	if d.zw != nil {
		if err := d.zw.Flush(); err != nil {
			return fmt.Errorf("recording: write %s: %w", d.f.Name(), err)
		}
	}
	return nil
}

func (d *DirStore) closeFile() error {
	err := d.flushLocked()
	if d.zw != nil {
		err = errors.Join(err, d.zw.Close())
	}
	err = errors.Join(err, d.f.Close())
	d.f, d.zw, d.w = nil, nil, nil
	if err != nil {
		return fmt.Errorf("recording: close file in %s: %w", d.dir, err)
	}
	return nil
}

// Flush writes buffered sessions to the current file.
func (d *DirStore) Flush(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.flushLocked()
}

// Close flushes and closes the current file. It is safe to call twice.
func (d *DirStore) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.closed.first() || d.f == nil {
		return nil
	}
	return d.closeFile()
}

// Files returns the session files of the directory in name (time) order. A
// directory that does not exist has no files.
func (d *DirStore) Files() ([]string, error) {
	ents, err := os.ReadDir(d.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
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
