package recording

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
)

// ErrNotFound is returned by [Reader.Get] when no session has the id.
var ErrNotFound = errors.New("recording: session not found")

// ErrStop may be returned by a [Reader.Scan] callback to end the scan early;
// Scan then returns nil.
var ErrStop = errors.New("recording: stop scan")

// Writer stores sessions. Implementations are safe for concurrent use.
type Writer interface {
	// Write stores the sessions; they may stay buffered until Flush.
	Write(ctx context.Context, s []*Session) error
	// Flush makes every written session visible to readers.
	Flush(ctx context.Context) error
	// Close flushes and releases the store. It is safe to call twice.
	Close() error
}

// Reader reads sessions back.
type Reader interface {
	// Scan calls fn for every session, in the store's order (time order of
	// files or index entries). It streams. Lines that do not parse are
	// skipped and reported to the error handler; an error returned by fn
	// ends the scan and is returned (except ErrStop, which ends it with nil).
	Scan(ctx context.Context, fn func(*Session) error) error
	// Get returns the session with the id, or an error wrapping ErrNotFound.
	Get(ctx context.Context, id string) (*Session, error)
}

// Store is a place sessions are written to and read from.
type Store interface {
	Writer
	Reader
}

// BadLineError describes a stored line that could not be decoded and was
// skipped.
type BadLineError struct {
	Source string // file or object name, or Redis key
	Line   int    // 1-based line number; 0 when the source has no lines (a Redis key)
	Err    error
}

func (e *BadLineError) Error() string {
	if e.Line == 0 {
		return fmt.Sprintf("recording: %s: skipped: %v", e.Source, e.Err)
	}
	return fmt.Sprintf("recording: %s:%d: skipped: %v", e.Source, e.Line, e.Err)
}

func (e *BadLineError) Unwrap() error { return e.Err }

// Defaults of the store options.
const (
	DefaultMaxLine        = 64 << 20 // longest JSONL line a reader accepts
	DefaultRotateBytes    = 64 << 20 // uncompressed bytes per file before rotation
	DefaultRedisKeyPrefix = "retrace:"
)

type options struct {
	onError        func(error)
	maxLine        int
	gzip           bool
	rotateBytes    int64
	rotateSessions int
	keyPrefix      string
	keyPrefixSet   bool
}

// Option configures a store opened by Open or one of the New*Store functions.
type Option func(*options)

// WithErrorHandler sets the function that receives every skipped line (a
// *BadLineError) and other non-fatal read problems. The zero value, nil,
// prints them to stderr.
func WithErrorHandler(fn func(error)) Option { return func(o *options) { o.onError = fn } }

// WithMaxLine caps the length of a line a reader accepts; longer lines are
// skipped and reported. Zero means DefaultMaxLine.
func WithMaxLine(n int) Option { return func(o *options) { o.maxLine = n } }

// WithGzip makes directory and object-storage writers compress their files
// (.jsonl.gz). Readers read plain and gzip files regardless. Off by default.
func WithGzip(on bool) Option { return func(o *options) { o.gzip = on } }

// WithRotateBytes starts a new file after n uncompressed bytes. Zero means
// DefaultRotateBytes; negative means never rotate by size.
func WithRotateBytes(n int64) Option { return func(o *options) { o.rotateBytes = n } }

// WithRotateSessions starts a new file after n sessions. Zero means no limit
// by count.
func WithRotateSessions(n int) Option { return func(o *options) { o.rotateSessions = n } }

// WithKeyPrefix sets the prefix of every Redis key, or of every object name
// in a bucket. The zero value means DefaultRedisKeyPrefix for Redis and no
// prefix for buckets. A "prefix" URL query parameter sets it too.
func WithKeyPrefix(p string) Option {
	return func(o *options) { o.keyPrefix, o.keyPrefixSet = p, true }
}

func newOptions(opts []Option) *options {
	o := &options{}
	for _, f := range opts {
		f(o)
	}
	if o.maxLine <= 0 {
		o.maxLine = DefaultMaxLine
	}
	if o.rotateBytes == 0 {
		o.rotateBytes = DefaultRotateBytes
	}
	if o.onError == nil {
		o.onError = func(err error) { fmt.Fprintln(os.Stderr, err) }
	}
	return o
}

// skipCounter counts lines readers skipped; every store embeds one.
type skipCounter struct{ n atomic.Int64 }

// Skipped returns how many stored lines or keys readers of this store have
// skipped because they did not decode.
func (c *skipCounter) Skipped() int64 { return c.n.Load() }

// Open opens the store named by url (see the package documentation for the
// forms). Directory stores create the directory on the first write.
func Open(ctx context.Context, url string, opts ...Option) (Store, error) {
	if url == "" {
		return nil, errors.New("recording: empty store URL")
	}
	scheme, rest, hasScheme := strings.Cut(url, "://")
	if !hasScheme {
		return NewDirStore(url, opts...)
	}
	switch scheme {
	case "file":
		if rest == "" {
			return nil, fmt.Errorf("recording: store URL %q names no directory", url)
		}
		return NewDirStore(rest, opts...)
	case "redis", "rediss":
		return openRedis(url, opts...)
	default:
		return openBlob(ctx, url, opts...)
	}
}

// closeOnce makes Close idempotent for stores.
type closeOnce struct{ done atomic.Bool }

func (c *closeOnce) first() bool { return c.done.CompareAndSwap(false, true) }
