package recording

import (
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob" // blob+file:// URLs
	_ "gocloud.dev/blob/memblob"  // mem:// URLs
)

// BlobStore keeps sessions as JSONL objects in a bucket (gocloud.dev/blob),
// named like the files of a DirStore plus a random writer tag so that many
// processes can write into one bucket:
// PREFIX sessions-<UTC time>-<counter>-<tag>.jsonl[.gz].
//
// An object becomes visible when it is closed: at rotation and at every
// Flush (each Flush therefore ends an object; the recorder flushes every
// few seconds, so a bucket collects one object per flush with traffic).
type BlobStore struct {
	skipCounter
	b      *blob.Bucket
	prefix string
	o      *options
	tag    string

	mu       sync.Mutex // guards the current object
	w        *blob.Writer
	zw       *gzip.Writer
	name     string
	line     []byte // scratch for encoding one session
	bytes    int64
	sessions int
	counter  int
	closed   closeOnce
}

var _ Store = (*BlobStore)(nil)

// NewBlobStore returns a store on the bucket; object names start with the
// WithKeyPrefix prefix (none by default). Close closes the bucket.
func NewBlobStore(b *blob.Bucket, opts ...Option) *BlobStore {
	o := newOptions(opts)
	var t [4]byte
	_, _ = rand.Read(t[:])
	return &BlobStore{b: b, prefix: o.keyPrefix, o: o, tag: hex.EncodeToString(t[:])}
}

func openBlob(ctx context.Context, url string, opts ...Option) (*BlobStore, error) {
	url = strings.TrimPrefix(url, "blob+")
	b, err := blob.OpenBucket(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("recording: open store %q: %w", url, err)
	}
	return NewBlobStore(b, opts...), nil
}

// Write appends the sessions to the current object, rotating first when it
// is full.
func (s *BlobStore) Write(ctx context.Context, ss []*Session) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.done.Load() {
		return errors.New("recording: write to closed blob store")
	}
	for _, sess := range ss {
		line, err := AppendMarshal(s.line[:0], sess)
		if err != nil {
			return fmt.Errorf("recording: encode session %q: %w", sess.ID, err)
		}
		s.line = line
		if s.w != nil && s.full(int64(len(line)+1)) {
			if err := s.closeObject(); err != nil {
				return err
			}
		}
		if s.w == nil {
			if err := s.openObject(ctx); err != nil {
				return err
			}
		}
		line = append(line, '\n')
		var out io.Writer = s.w
		if s.zw != nil {
			out = s.zw
		}
		if _, err := out.Write(line); err != nil {
			return fmt.Errorf("recording: write object %s: %w", s.name, err)
		}
		s.bytes += int64(len(line))
		s.sessions++
	}
	return nil
}

func (s *BlobStore) full(next int64) bool {
	if s.o.rotateSessions > 0 && s.sessions >= s.o.rotateSessions {
		return true
	}
	return s.o.rotateBytes > 0 && s.bytes > 0 && s.bytes+next > s.o.rotateBytes
}

func (s *BlobStore) openObject(ctx context.Context) error {
	ext := ".jsonl"
	if s.o.gzip {
		ext += ".gz"
	}
	s.counter++
	s.name = fmt.Sprintf("%s%s%s-%04d-%s%s", s.prefix, filePrefix, time.Now().UTC().Format(fileTime), s.counter, s.tag, ext)
	// The writer outlives the Write call that opened it; it must not be
	// cancelled with that call's context.
	w, err := s.b.NewWriter(context.WithoutCancel(ctx), s.name, &blob.WriterOptions{ContentType: "application/jsonl"})
	if err != nil {
		return fmt.Errorf("recording: create object %s: %w", s.name, err)
	}
	s.w, s.bytes, s.sessions = w, 0, 0
	if s.o.gzip {
		s.zw = gzip.NewWriter(w)
	}
	return nil
}

func (s *BlobStore) closeObject() error {
	if s.w == nil {
		return nil
	}
	var err error
	if s.zw != nil {
		err = s.zw.Close()
	}
	err = errors.Join(err, s.w.Close())
	s.w, s.zw = nil, nil
	if err != nil {
		return fmt.Errorf("recording: close object %s: %w", s.name, err)
	}
	return nil
}

// Flush closes the current object, which makes it visible to readers.
func (s *BlobStore) Flush(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closeObject()
}

// Close closes the current object and the bucket. It is safe to call twice.
func (s *BlobStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed.first() {
		return nil
	}
	return errors.Join(s.closeObject(), s.b.Close())
}

// Objects returns the names of the session objects in name (time) order.
func (s *BlobStore) Objects(ctx context.Context) ([]string, error) {
	var names []string
	it := s.b.List(&blob.ListOptions{Prefix: s.prefix + filePrefix})
	for {
		obj, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			return names, nil // List returns names in lexicographic order
		}
		if err != nil {
			return nil, fmt.Errorf("recording: list objects %s*: %w", s.prefix+filePrefix, err)
		}
		if !obj.IsDir && IsSessionFile(obj.Key) {
			names = append(names, obj.Key)
		}
	}
}

// Scan reads every session object in name order.
func (s *BlobStore) Scan(ctx context.Context, fn func(*Session) error) error {
	names, err := s.Objects(ctx)
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := s.scanObject(ctx, name, fn); err != nil {
			if errors.Is(err, ErrStop) {
				return nil
			}
			return err
		}
	}
	return nil
}

func (s *BlobStore) scanObject(ctx context.Context, name string, fn func(*Session) error) error {
	r, err := s.b.NewReader(ctx, name, nil)
	if err != nil {
		return fmt.Errorf("recording: open object %s: %w", name, err)
	}
	defer r.Close()
	return scanStream(ctx, name, r, s.o, &s.skipCounter, fn)
}

// Get scans the bucket for the session with the id.
func (s *BlobStore) Get(ctx context.Context, id string) (*Session, error) {
	return getByScan(ctx, s, id)
}
