package recording

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
)

// ErrNotFound is returned by [Reader.Get] when no session has the id.
var ErrNotFound = errors.New("recording: session not found")

// WriteError is the error of a Writer that stored some of the sessions of
// a Write, the first Stored of them, before Err stopped it.
type WriteError struct {
	Stored int
	Err    error
}

func (e *WriteError) Error() string {
	return fmt.Sprintf("%v (after %d sessions stored)", e.Err, e.Stored)
}

func (e *WriteError) Unwrap() error { return e.Err }

// ErrRejected is wrapped by the error of a Writer for a session it will
// never store, however often it is retried (it does not encode, or a
// different session has its id); the pipeline drops and counts it instead
// of retrying.
var ErrRejected = errors.New("recording: session rejected by the store")

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

// Settings are the store options resolved (NewSettings), for the stores of
// other packages (recording/redisstore, recording/blobstore).
type Settings struct {
	OnError        func(error) // never nil once resolved
	MaxLine        int         // > 0 once resolved
	Gzip           bool
	RotateBytes    int64 // 0 resolved to DefaultRotateBytes; negative: never
	RotateSessions int   // 0: no limit
	KeyPrefix      string
	KeyPrefixSet   bool        // WithKeyPrefix was given (an empty prefix is a prefix)
	FileMode       os.FileMode // of files a directory store creates; 0 resolved to DefaultFileMode
	DirMode        os.FileMode // of the directory; 0 resolved to DefaultDirMode
}

// Option configures a store opened by Open or one of the New*Store functions.
type Option func(*Settings)

// WithErrorHandler sets the function that receives every skipped line (a
// *BadLineError) and other non-fatal read problems. The zero value, nil,
// prints them to stderr.
func WithErrorHandler(fn func(error)) Option { return func(o *Settings) { o.OnError = fn } }

// WithMaxLine caps the length of a line a reader accepts; longer lines are
// skipped and reported. Zero means DefaultMaxLine.
func WithMaxLine(n int) Option { return func(o *Settings) { o.MaxLine = n } }

// WithGzip makes directory and object-storage writers compress their files
// (.jsonl.gz). Readers read plain and gzip files regardless. Off by default.
func WithGzip(on bool) Option { return func(o *Settings) { o.Gzip = on } }

// WithRotateBytes starts a new file after n uncompressed bytes. Zero means
// DefaultRotateBytes; negative means never rotate by size.
func WithRotateBytes(n int64) Option { return func(o *Settings) { o.RotateBytes = n } }

// WithRotateSessions starts a new file after n sessions. Zero means no limit
// by count.
func WithRotateSessions(n int) Option { return func(o *Settings) { o.RotateSessions = n } }

// WithKeyPrefix sets the prefix of every Redis key, or of every object name
// in a bucket. The zero value means DefaultRedisKeyPrefix for Redis and no
// prefix for buckets. A "prefix" URL query parameter sets it too.
func WithKeyPrefix(p string) Option {
	return func(o *Settings) { o.KeyPrefix, o.KeyPrefixSet = p, true }
}

// WithPermissions sets the permissions of the files and the directory a
// directory store creates. Zero values mean DefaultFileMode (0600) and
// DefaultDirMode (0700): recordings hold what the service's clients sent.
func WithPermissions(file, dir os.FileMode) Option {
	return func(o *Settings) { o.FileMode, o.DirMode = file, dir }
}

// NewSettings applies opts to the defaults.
func NewSettings(opts []Option) *Settings {
	o := &Settings{}
	for _, f := range opts {
		f(o)
	}
	if o.MaxLine <= 0 {
		o.MaxLine = DefaultMaxLine
	}
	if o.RotateBytes == 0 {
		o.RotateBytes = DefaultRotateBytes
	}
	if o.FileMode == 0 {
		o.FileMode = DefaultFileMode
	}
	if o.DirMode == 0 {
		o.DirMode = DefaultDirMode
	}
	if o.OnError == nil {
		o.OnError = func(err error) { fmt.Fprintln(os.Stderr, err) }
	}
	return o
}

// SkipCounter counts lines readers skipped; every store embeds one.
type SkipCounter struct{ n atomic.Int64 }

// Skipped returns how many stored lines or keys readers of this store have
// skipped because they did not decode.
func (c *SkipCounter) Skipped() int64 { return c.n.Load() }

// Skip counts one skipped line or key.
func (c *SkipCounter) Skip() { c.n.Add(1) }

// An Opener opens a store of the URL schemes it is registered for (see
// RegisterScheme); settings are the options Open was given, resolved.
type Opener func(ctx context.Context, url string, settings *Settings) (Store, error)

var schemes struct {
	sync.RWMutex
	m map[string]Opener
}

// RegisterScheme makes Open open URLs of the schemes with open. Stores
// outside this package call it from init: package recording links only the
// directory store, so that the agent a service links stays small, and a
// program links the others by importing them:
//
//	import _ "github.com/retrace-dev/retrace/recording/redisstore" // redis://, rediss://
//	import _ "github.com/retrace-dev/retrace/recording/cloud"      // s3://, gs://, azblob://, mem://, blob+file://
//
// Registering a scheme twice replaces the first opener.
func RegisterScheme(open Opener, scheme ...string) {
	schemes.Lock()
	defer schemes.Unlock()
	if schemes.m == nil {
		schemes.m = map[string]Opener{}
	}
	for _, s := range scheme {
		schemes.m[s] = open
	}
}

// storeImports names the package that registers each well-known scheme,
// for the error of a URL whose store is not linked in.
var storeImports = map[string]string{
	"redis":  "github.com/retrace-dev/retrace/recording/redisstore",
	"rediss": "github.com/retrace-dev/retrace/recording/redisstore",
	"s3":     "github.com/retrace-dev/retrace/recording/cloud",
	"gs":     "github.com/retrace-dev/retrace/recording/cloud",
	"azblob": "github.com/retrace-dev/retrace/recording/cloud",
	"mem":    "github.com/retrace-dev/retrace/recording/blobstore",
}

// ErrSchemeNotLinked is wrapped by the error of Open for a URL whose store
// is not linked into the program (see RegisterScheme).
var ErrSchemeNotLinked = errors.New("store not linked into this program")

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
	if scheme == "file" {
		if rest == "" {
			return nil, fmt.Errorf("recording: store URL %q names no directory", url)
		}
		return NewDirStore(rest, opts...)
	}
	schemes.RLock()
	open := schemes.m[scheme]
	schemes.RUnlock()
	if open != nil {
		return open(ctx, url, NewSettings(opts))
	}
	pkg := storeImports[scheme]
	if pkg == "" && strings.HasPrefix(scheme, "blob+") {
		pkg = "github.com/retrace-dev/retrace/recording/blobstore"
	}
	if pkg != "" {
		return nil, fmt.Errorf("recording: store URL %q: %s:// %w: add import _ %q", url, scheme, ErrSchemeNotLinked, pkg)
	}
	return nil, fmt.Errorf("recording: store URL %q: unknown scheme %q (a directory, file://, redis://, s3://, gs://, azblob://, mem://, blob+file://)", url, scheme)
}
