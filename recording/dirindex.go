package recording

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"sync"
)

// dirIndex maps session ids to where they are in a directory's files, so
// that DirStore.Get reads one line instead of scanning the directory. It is
// built on the first Get and extended, file by file, with what was
// appended since, whenever an id is not found. Plain files are indexed by
// byte offset; a gzip file (no random access) by name only, and Get scans
// that one file. Memory: about 100 bytes per session.
type dirIndex struct {
	mu    sync.Mutex
	files map[string]int64 // bytes indexed so far (plain) or size indexed (gzip)
	ids   map[string]idLoc
}

type idLoc struct {
	file string
	off  int64 // -1 in a gzip file
	n    int
}

func (d *DirStore) getIndexed(ctx context.Context, id string) (*Session, error) {
	ix := &d.index
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.ids == nil {
		ix.files, ix.ids = map[string]int64{}, map[string]idLoc{}
	}
	if loc, ok := ix.ids[id]; ok {
		if s, err := d.readLoc(ctx, loc, id); err == nil && s != nil {
			return s, nil
		}
	}
	if err := d.refreshIndex(ctx); err != nil {
		return nil, err
	}
	if loc, ok := ix.ids[id]; ok {
		s, err := d.readLoc(ctx, loc, id)
		if err != nil {
			return nil, err
		}
		if s != nil {
			return s, nil
		}
	}
	return nil, fmt.Errorf("%w: id %q in %s", ErrNotFound, id, d.dir)
}

// readLoc reads the session id at loc; nil when it is not there (the file
// changed since it was indexed).
func (d *DirStore) readLoc(ctx context.Context, loc idLoc, id string) (*Session, error) {
	if loc.off < 0 {
		var found *Session
		err := d.scanFile(ctx, loc.file, func(s *Session) error {
			if s.ID == id {
				found = s
				return ErrStop
			}
			return nil
		})
		if err != nil && !errors.Is(err, ErrStop) {
			return nil, err
		}
		return found, nil
	}
	f, err := os.Open(loc.file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("recording: open %s: %w", loc.file, err)
	}
	defer f.Close()
	line := make([]byte, loc.n)
	if _, err := f.ReadAt(line, loc.off); err != nil {
		return nil, nil
	}
	s, err := Unmarshal(line)
	if err != nil || s.ID != id {
		return nil, nil
	}
	return s, nil
}

// refreshIndex indexes what the directory's files hold beyond what was
// indexed before.
func (d *DirStore) refreshIndex(ctx context.Context) error {
	files, err := d.Files()
	if err != nil {
		return err
	}
	for _, name := range files {
		if err := ctx.Err(); err != nil {
			return err
		}
		st, err := os.Stat(name)
		if err != nil {
			continue // removed since it was listed
		}
		done, seen := d.index.files[name]
		if seen && st.Size() == done {
			continue
		}
		if strings.HasSuffix(name, ".gz") {
			err = d.indexGzip(ctx, name, st.Size())
		} else {
			if st.Size() < done { // rewritten: start again
				done = 0
			}
			err = d.indexPlain(name, done)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

type idOnly struct {
	ID string `json:"id"`
}

// indexPlain indexes the whole lines of a plain file from byte off on.
func (d *DirStore) indexPlain(name string, off int64) error {
	f, err := os.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("recording: open %s: %w", name, err)
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return fmt.Errorf("recording: seek %s: %w", name, err)
	}
	br := bufio.NewReaderSize(f, 64<<10)
	var line []byte // the line, while it is not longer than maxLine
	total := 0      // bytes of the line, kept or not
	for {
		chunk, err := br.ReadSlice('\n')
		total += len(chunk)
		if total <= d.o.MaxLine {
			line = append(line, chunk...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil { // io.EOF: an unterminated last line waits for its writer
			d.index.files[name] = off
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("recording: read %s: %w", name, err)
		}
		if total <= d.o.MaxLine {
			body := bytes.TrimRight(line, "\r\n")
			var v idOnly
			if json.Unmarshal(body, &v) == nil && v.ID != "" {
				if _, dup := d.index.ids[v.ID]; !dup { // the first occurrence wins, as in a scan
					d.index.ids[v.ID] = idLoc{file: name, off: off, n: len(body)}
				}
			}
		}
		off += int64(total)
		line, total = line[:0], 0
	}
}

// indexGzip indexes a gzip file by name.
func (d *DirStore) indexGzip(ctx context.Context, name string, size int64) error {
	err := d.scanFile(ctx, name, func(s *Session) error {
		if _, dup := d.index.ids[s.ID]; !dup {
			d.index.ids[s.ID] = idLoc{file: name, off: -1}
		}
		return nil
	})
	d.index.files[name] = size
	return err
}
