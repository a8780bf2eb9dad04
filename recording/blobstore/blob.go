// Package blobstore is the object-storage store of recording sessions,
// through gocloud.dev/blob. Importing it registers mem:// and
// blob+file:// (gocloud's in-memory and local-directory buckets) with
// recording.Open; recording/cloud adds s3://, gs:// and azblob://:
//
//	import _ "github.com/retrace-dev/retrace/recording/cloud"
//
// It is a package of its own so that the agent a service links (patches)
// does not link gocloud unless the service records to a bucket.
package blobstore

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob" // blob+file:// URLs
	_ "gocloud.dev/blob/memblob"  // mem:// URLs

	"github.com/retrace-dev/retrace/recording"
)

func init() { Register("mem", "blob+file") }

// Register makes recording.Open open URLs of the schemes (gocloud.dev/blob
// URL schemes whose drivers the program links, optionally written with a
// "blob+" prefix) as a Store. recording/cloud registers s3, gs and azblob.
func Register(scheme ...string) {
	recording.RegisterScheme(func(ctx context.Context, url string, o *recording.Settings) (recording.Store, error) {
		return open(ctx, url, o)
	}, scheme...)
}

// Store keeps sessions as JSONL objects in a bucket (gocloud.dev/blob),
// named like the files of a DirStore plus a random writer tag so that many
// processes can write into one bucket:
// PREFIX sessions-<UTC time>-<counter>-<tag>.jsonl[.gz].
//
// An object becomes visible when it is closed: at rotation and at every
// Flush (each Flush therefore ends an object; the recorder flushes every
// few seconds, so a bucket collects one object per flush with traffic).
type Store struct {
	recording.SkipCounter
	b      *blob.Bucket
	prefix string
	o      *recording.Settings
	tag    string

	mu    sync.Mutex // guards the current object
	w     *blob.Writer
	abort context.CancelFunc // cancels w's upload: Close then writes nothing
	zw    *gzip.Writer
	name  string
	line  []byte // scratch for encoding one session
	// cur holds the lines written to the current object, uncompressed:
	// an object whose upload fails is lost whole, and its lines go to
	// retry, written first into the next object (the backlog written when
	// the bucket answers again). Both are bounded by maxRetry.
	cur, retry []byte
	bytes      int64
	sessions   int
	lost       int // bytes given up from retry since the last error said so
	counter    int
	closed     atomic.Bool
}

var _ recording.Store = (*Store)(nil)

// New returns a store on the bucket; object names start with the
// WithKeyPrefix prefix (none by default). Close closes the bucket.
func New(b *blob.Bucket, opts ...recording.Option) *Store {
	return newStore(b, recording.NewSettings(opts))
}

func newStore(b *blob.Bucket, o *recording.Settings) *Store {
	var t [4]byte
	_, _ = rand.Read(t[:])
	return &Store{b: b, prefix: o.KeyPrefix, o: o, tag: hex.EncodeToString(t[:])}
}

func open(ctx context.Context, url string, o *recording.Settings) (*Store, error) {
	url = strings.TrimPrefix(url, "blob+")
	b, err := blob.OpenBucket(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("recording: open store %q: %w", url, err)
	}
	return newStore(b, o), nil
}

// Write appends the sessions to the current object, rotating first when it
// is full. When it fails after taking some of them it returns a
// *recording.WriteError saying how many, so a retry does not write them
// twice.
func (s *Store) Write(ctx context.Context, ss []*recording.Session) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return errors.New("recording: write to closed blob store")
	}
	for i, sess := range ss {
		line, err := recording.AppendMarshal(s.line[:0], sess)
		if err != nil {
			return &recording.WriteError{Stored: i, Err: fmt.Errorf("recording: encode session %q: %w: %w", sess.ID, recording.ErrRejected, err)}
		}
		s.line = line
		if s.w != nil && s.full(int64(len(line)+1)) {
			if err := s.closeObject(); err != nil {
				return &recording.WriteError{Stored: i, Err: err}
			}
		}
		if s.w == nil {
			if err := s.openObject(ctx); err != nil {
				return &recording.WriteError{Stored: i, Err: err}
			}
		}
		line = append(line, '\n')
		var out io.Writer = s.w
		if s.zw != nil {
			out = s.zw
		}
		if _, err := out.Write(line); err != nil {
			// the object may hold part of the line: its upload is
			// aborted, the sessions it took since the last Flush go to
			// the next object, and so does this one (the caller's retry)
			s.abort()
			_ = s.w.Close()
			s.w, s.zw = nil, nil
			s.keepForRetry()
			return &recording.WriteError{Stored: i, Err: fmt.Errorf("recording: write object %s: %w", s.name, err)}
		}
		s.cur = append(s.cur, line...)
		s.bytes += int64(len(line))
		s.sessions++
	}
	return nil
}

func (s *Store) full(next int64) bool {
	if s.o.RotateSessions > 0 && s.sessions >= s.o.RotateSessions {
		return true
	}
	return s.o.RotateBytes > 0 && s.bytes > 0 && s.bytes+next > s.o.RotateBytes
}

// maxRetry bounds the bytes of sessions kept for the next object after
// failed uploads; beyond it the oldest are given up (and the error says so).
const maxRetry = 64 << 20

// keepForRetry moves the lines of the object just lost to retry.
func (s *Store) keepForRetry() {
	s.retry = append(s.retry, s.cur...)
	s.cur = s.cur[:0]
	if len(s.retry) > maxRetry {
		cut := len(s.retry) - maxRetry
		if i := bytes.IndexByte(s.retry[cut:], '\n'); i >= 0 {
			cut += i + 1
		}
		s.retry = append(s.retry[:0], s.retry[cut:]...)
		s.lost += cut
	}
}

func (s *Store) openObject(ctx context.Context) error {
	ext := ".jsonl"
	if s.o.Gzip {
		ext += ".gz"
	}
	s.counter++
	s.name = fmt.Sprintf("%s%s%s-%04d-%s%s", s.prefix, recording.FilePrefix, time.Now().UTC().Format(recording.FileTime), s.counter, s.tag, ext)
	// The writer outlives the Write call that opened it; it must not be
	// cancelled with that call's context.
	wctx, abort := context.WithCancel(context.WithoutCancel(ctx))
	w, err := s.b.NewWriter(wctx, s.name, &blob.WriterOptions{ContentType: "application/jsonl"})
	if err != nil {
		abort()
		return fmt.Errorf("recording: create object %s: %w", s.name, err)
	}
	s.w, s.abort, s.bytes, s.sessions = w, abort, 0, 0
	if s.o.Gzip {
		s.zw = gzip.NewWriter(w)
	}
	s.cur = s.cur[:0]
	if len(s.retry) > 0 {
		// the sessions of objects whose upload failed, first
		var out io.Writer = s.w
		if s.zw != nil {
			out = s.zw
		}
		if _, err := out.Write(s.retry); err != nil {
			s.abort()
			_ = s.w.Close()
			s.w, s.zw = nil, nil
			return fmt.Errorf("recording: write object %s: %w", s.name, err)
		}
		s.cur = append(s.cur, s.retry...)
		s.bytes += int64(len(s.retry))
		s.retry = s.retry[:0]
	}
	return nil
}

func (s *Store) closeObject() error {
	if s.w == nil {
		return nil
	}
	var err error
	if s.zw != nil {
		err = s.zw.Close()
	}
	err = errors.Join(err, s.w.Close())
	s.abort() // the upload is over: releases the writer's context
	s.w, s.zw = nil, nil
	if err != nil {
		s.keepForRetry()
		return fmt.Errorf("recording: close object %s: %w", s.name, err)
	}
	s.cur = s.cur[:0]
	if s.lost > 0 {
		lost := s.lost
		s.lost = 0
		return fmt.Errorf("recording: %d bytes of sessions given up after failed uploads (more than %d waited)", lost, maxRetry)
	}
	return nil
}

// Flush closes the current object, which makes it visible to readers;
// sessions of failed uploads waiting for a retry are written first.
func (s *Store) Flush(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w == nil && len(s.retry) > 0 && !s.closed.Load() {
		if err := s.openObject(ctx); err != nil {
			return err
		}
	}
	return s.closeObject()
}

// Close closes the current object and the bucket. It is safe to call twice.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	var err error
	if s.w == nil && len(s.retry) > 0 {
		err = s.openObject(context.Background())
	}
	return errors.Join(err, s.closeObject(), s.b.Close())
}

// Objects returns the names of the session objects in name (time) order.
func (s *Store) Objects(ctx context.Context) ([]string, error) {
	var names []string
	it := s.b.List(&blob.ListOptions{Prefix: s.prefix + recording.FilePrefix})
	for {
		obj, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			return names, nil // List returns names in lexicographic order
		}
		if err != nil {
			return nil, fmt.Errorf("recording: list objects %s*: %w", s.prefix+recording.FilePrefix, err)
		}
		if !obj.IsDir && recording.IsSessionFile(obj.Key) {
			names = append(names, obj.Key)
		}
	}
}

// Scan reads every session object in name order.
func (s *Store) Scan(ctx context.Context, fn func(*recording.Session) error) error {
	names, err := s.Objects(ctx)
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := s.scanObject(ctx, name, fn); err != nil {
			if errors.Is(err, recording.ErrStop) {
				return nil
			}
			return err
		}
	}
	return nil
}

func (s *Store) scanObject(ctx context.Context, name string, fn func(*recording.Session) error) error {
	r, err := s.b.NewReader(ctx, name, nil)
	if err != nil {
		return fmt.Errorf("recording: open object %s: %w", name, err)
	}
	defer r.Close()
	return recording.ReadJSONL(ctx, name, r, s.o, &s.SkipCounter, fn)
}

// Get scans the bucket for the session with the id.
func (s *Store) Get(ctx context.Context, id string) (*recording.Session, error) {
	return recording.GetByScan(ctx, s, id)
}
