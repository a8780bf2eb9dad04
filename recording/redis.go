package recording

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	"github.com/redis/go-redis/v9"
)

// RedisStore keeps one session per key (PREFIX + "s:" + id, the JSONL line)
// and an index, the sorted set PREFIX + "index" of ids scored by the
// session's start time in unix nanoseconds (ties in id order), so Scan
// streams in time order and Get is one key lookup. Mock servers of a large
// replay read pre-warmed sessions from it.
type RedisStore struct {
	skipCounter
	c      *redis.Client
	prefix string
	o      *options
	closed closeOnce
}

var _ Store = (*RedisStore)(nil)

// redisPage is how many sessions Scan fetches per round trip.
const redisPage = 256

// NewRedisStore returns a store on the client; Close closes the client.
func NewRedisStore(c *redis.Client, opts ...Option) *RedisStore {
	o := newOptions(opts)
	prefix := DefaultRedisKeyPrefix
	if o.keyPrefixSet {
		prefix = o.keyPrefix
	}
	return &RedisStore{c: c, prefix: prefix, o: o}
}

// openRedis opens redis://[user:pass@]HOST:PORT/N[?prefix=P&…]; the prefix
// parameter is ours, the others are go-redis's.
func openRedis(raw string, opts ...Option) (*RedisStore, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("recording: store URL %q: %w", raw, err)
	}
	q := u.Query()
	if q.Has("prefix") {
		opts = append([]Option{WithKeyPrefix(q.Get("prefix"))}, opts...)
		q.Del("prefix")
		u.RawQuery = q.Encode()
	}
	ro, err := redis.ParseURL(u.String())
	if err != nil {
		return nil, fmt.Errorf("recording: store URL %q: %w", raw, err)
	}
	return NewRedisStore(redis.NewClient(ro), opts...), nil
}

// Prefix returns the key prefix.
func (r *RedisStore) Prefix() string { return r.prefix }

func (r *RedisStore) key(id string) string { return r.prefix + "s:" + id }
func (r *RedisStore) index() string        { return r.prefix + "index" }

// Write stores the sessions and indexes them, in one pipeline. A session
// with an id already stored replaces it.
func (r *RedisStore) Write(ctx context.Context, ss []*Session) error {
	if len(ss) == 0 {
		return nil
	}
	pipe := r.c.Pipeline()
	for _, s := range ss {
		line, err := Marshal(s)
		if err != nil {
			return fmt.Errorf("recording: encode session %q: %w", s.ID, err)
		}
		pipe.Set(ctx, r.key(s.ID), line, 0)
		pipe.ZAdd(ctx, r.index(), redis.Z{Score: float64(s.At.UnixNano()), Member: s.ID})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("recording: write to redis %s: %w", r.c.Options().Addr, err)
	}
	return nil
}

// Flush does nothing: every Write is already stored.
func (r *RedisStore) Flush(context.Context) error { return nil }

// Close closes the client. It is safe to call twice.
func (r *RedisStore) Close() error {
	if !r.closed.first() {
		return nil
	}
	return r.c.Close()
}

// Scan walks the index in time order, a page at a time. Ids whose key has
// gone (expired, deleted) are skipped silently; keys that do not decode are
// reported.
func (r *RedisStore) Scan(ctx context.Context, fn func(*Session) error) error {
	for start := int64(0); ; start += redisPage {
		ids, err := r.c.ZRange(ctx, r.index(), start, start+redisPage-1).Result()
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
			s, err := Unmarshal([]byte(str))
			if err != nil {
				r.n.Add(1)
				r.o.onError(&BadLineError{Source: keys[i], Err: err})
				continue
			}
			if err := fn(s); err != nil {
				if errors.Is(err, ErrStop) {
					return nil
				}
				return err
			}
		}
		if len(ids) < redisPage {
			return nil
		}
	}
}

// Get reads the session's key.
func (r *RedisStore) Get(ctx context.Context, id string) (*Session, error) {
	b, err := r.c.Get(ctx, r.key(id)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("%w: id %q (key %s)", ErrNotFound, id, r.key(id))
	}
	if err != nil {
		return nil, fmt.Errorf("recording: get %s from redis %s: %w", r.key(id), r.c.Options().Addr, err)
	}
	s, err := Unmarshal(b)
	if err != nil {
		r.n.Add(1)
		return nil, &BadLineError{Source: r.key(id), Err: err}
	}
	return s, nil
}
