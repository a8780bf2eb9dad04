// Package redisstore is the Redis store of recording sessions: one key per
// session and a sorted-set index in time order, so the mock servers of a
// large replay read pre-warmed sessions from it. Importing it registers
// redis:// and rediss:// with recording.Open:
//
//	import _ "github.com/retrace-dev/retrace/recording/redisstore"
//
// It is a package of its own so that the agent a service links (patches)
// does not link go-redis unless the service records to Redis.
package redisstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/retrace-dev/retrace/recording"
)

func init() {
	recording.RegisterScheme(func(_ context.Context, url string, o *recording.Settings) (recording.Store, error) {
		return open(url, o)
	}, "redis", "rediss")
}

// Store keeps one session per key (PREFIX + "s:" + id, the JSONL line)
// and an index, the sorted set PREFIX + "index" of ids scored by the
// session's start time in unix nanoseconds (ties in id order), so Scan
// streams in time order and Get is one key lookup.
type Store struct {
	recording.SkipCounter
	c      *redis.Client
	prefix string
	o      *recording.Settings
	closed atomic.Bool
}

var _ recording.Store = (*Store)(nil)

// page is how many sessions Scan fetches per round trip.
const page = 256

// New returns a store on the client; Close closes the client.
func New(c *redis.Client, opts ...recording.Option) *Store {
	return newStore(c, recording.NewSettings(opts))
}

func newStore(c *redis.Client, o *recording.Settings) *Store {
	prefix := recording.DefaultRedisKeyPrefix
	if o.KeyPrefixSet {
		prefix = o.KeyPrefix
	}
	return &Store{c: c, prefix: prefix, o: o}
}

// open opens redis://[user:pass@]HOST:PORT/N[?prefix=P&…]; the prefix
// parameter is ours, the others are go-redis's.
func open(raw string, o *recording.Settings) (*Store, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("recording: store URL %q: %w", raw, err)
	}
	q := u.Query()
	if q.Has("prefix") && !o.KeyPrefixSet {
		o.KeyPrefix, o.KeyPrefixSet = q.Get("prefix"), true
	}
	q.Del("prefix")
	u.RawQuery = q.Encode()
	ro, err := redis.ParseURL(u.String())
	if err != nil {
		return nil, fmt.Errorf("recording: store URL %q: %w", raw, err)
	}
	// the pipeline bounds every call with its context: a frozen server
	// fails the call at its deadline and the call is retried
	ro.ContextTimeoutEnabled = true
	return newStore(redis.NewClient(ro), o), nil
}

// Prefix returns the key prefix.
func (r *Store) Prefix() string { return r.prefix }

func (r *Store) key(id string) string { return r.prefix + "s:" + id }
func (r *Store) index() string        { return r.prefix + "index" }

// ErrExists is wrapped by the error of Write for a session whose id is
// stored already with other content: a store never overwrites a session.
var ErrExists = fmt.Errorf("a different session with this id is stored already: %w", recording.ErrRejected)

// Write stores the sessions and indexes them, in one pipeline. A key that
// exists is never overwritten (SET NX): the same session again (a Write
// retried after a failure that reached the server) is fine; a different one
// is an error wrapping ErrExists, after the others are stored.
func (r *Store) Write(ctx context.Context, ss []*recording.Session) error {
	if len(ss) == 0 {
		return nil
	}
	pipe := r.c.Pipeline()
	lines := make([][]byte, len(ss))
	sets := make([]*redis.BoolCmd, len(ss))
	for i, s := range ss {
		line, err := recording.Marshal(s)
		if err != nil {
			return fmt.Errorf("recording: encode session %q: %w: %w", s.ID, recording.ErrRejected, err)
		}
		lines[i] = line
		sets[i] = pipe.SetNX(ctx, r.key(s.ID), line, 0)
		pipe.ZAddNX(ctx, r.index(), redis.Z{Score: float64(s.At.UnixNano()), Member: s.ID})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("recording: write to redis %s: %w", r.c.Options().Addr, err)
	}
	var errs []error
	for i, set := range sets {
		if set.Val() {
			continue
		}
		cur, err := r.c.Get(ctx, r.key(ss[i].ID)).Bytes()
		if err != nil {
			return fmt.Errorf("recording: read back %s from redis %s: %w", r.key(ss[i].ID), r.c.Options().Addr, err)
		}
		if !bytes.Equal(cur, lines[i]) {
			errs = append(errs, fmt.Errorf("recording: redis %s: key %s: %w, not overwritten", r.c.Options().Addr, r.key(ss[i].ID), ErrExists))
		}
	}
	return errors.Join(errs...)
}

// Flush does nothing: every Write is already stored.
func (r *Store) Flush(context.Context) error { return nil }

// Close closes the client. It is safe to call twice.
func (r *Store) Close() error {
	if !r.closed.CompareAndSwap(false, true) {
		return nil
	}
	return r.c.Close()
}

// Scan walks the index in time order, a page at a time. Ids whose key has
// gone (expired, deleted) are skipped silently; keys that do not decode are
// reported.
func (r *Store) Scan(ctx context.Context, fn func(*recording.Session) error) error {
	for start := int64(0); ; start += page {
		ids, err := r.c.ZRange(ctx, r.index(), start, start+page-1).Result()
		if err != nil {
			return fmt.Errorf("recording: read index %s from redis %s: %w", r.index(), r.c.Options().Addr, err)
		}
		if len(ids) == 0 {
			return nil
		}
		keys := make([]string, len(ids))
		for i, id := range ids {
			keys[i] = r.key(id)
		}
		vals, err := r.c.MGet(ctx, keys...).Result()
		if err != nil {
			return fmt.Errorf("recording: read sessions from redis %s: %w", r.c.Options().Addr, err)
		}
		for i, v := range vals {
			str, ok := v.(string)
			if !ok {
				continue
			}
			s, err := recording.Unmarshal([]byte(str))
			if err != nil {
				r.Skip()
				r.o.OnError(&recording.BadLineError{Source: keys[i], Err: err})
				continue
			}
			if err := fn(s); err != nil {
				if errors.Is(err, recording.ErrStop) {
					return nil
				}
				return err
			}
		}
		if len(ids) < page {
			return nil
		}
	}
}

// Get reads the session's key.
func (r *Store) Get(ctx context.Context, id string) (*recording.Session, error) {
	b, err := r.c.Get(ctx, r.key(id)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("%w: id %q (key %s)", recording.ErrNotFound, id, r.key(id))
	}
	if err != nil {
		return nil, fmt.Errorf("recording: get %s from redis %s: %w", r.key(id), r.c.Options().Addr, err)
	}
	s, err := recording.Unmarshal(b)
	if err != nil {
		r.Skip()
		return nil, &recording.BadLineError{Source: r.key(id), Err: err}
	}
	return s, nil
}
