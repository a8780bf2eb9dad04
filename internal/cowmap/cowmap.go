// Package cowmap holds maps for keys added and removed rarely and looked
// up on every read and write: the agent's connections (Map), and the
// traces and sessions of requests in progress (Small). A lookup takes no
// lock and no atomic read-modify-write (on a busy VM those cost tens of
// nanoseconds each, and pass a cache line between the cores of a
// connection's reader and writer): each of 256 shards publishes an
// immutable map or list through an atomic pointer, and a writer copies its
// shard's under the shard's mutex, about n/256 entries for n keys.
package cowmap

import (
	"sync"
	"sync/atomic"
)

// Key is what a Map is keyed by: connection ids and addresses, goroutine
// ids, hashes.
type Key interface{ ~uint64 | ~uintptr | ~int64 }

// Map is the sharded copy-on-write map. The zero value is empty and ready
// to use; a Map must not be copied.
type Map[K Key, V any] struct {
	shards [256]shard[K, V]
}

type shard[K Key, V any] struct {
	mu sync.Mutex // serialises writers; readers never take it
	m  atomic.Pointer[map[K]V]
	_  [48]byte // keep shards on separate cache lines
}

func (t *Map[K, V]) shard(k K) *shard[K, V] {
	return &t.shards[(uint64(k)*0x9E3779B97F4A7C15)>>56]
}

// Get returns the value of k.
func (t *Map[K, V]) Get(k K) (V, bool) {
	if p := t.shard(k).m.Load(); p != nil {
		v, ok := (*p)[k]
		return v, ok
	}
	var zero V
	return zero, false
}

// Update replaces the map of k's shard by a copy changed by f, which may
// read and change k's entry (and must leave the others alone). Updates of
// one shard are serialised.
func (t *Map[K, V]) Update(k K, f func(m map[K]V)) {
	s := t.shard(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	var cur map[K]V
	if p := s.m.Load(); p != nil {
		cur = *p
	}
	next := make(map[K]V, len(cur)+1)
	for ck, cv := range cur {
		next[ck] = cv
	}
	f(next)
	if len(next) == 0 {
		s.m.Store(nil)
	} else {
		s.m.Store(&next)
	}
}

// Delete removes k's entry when it has one and keep (nil: none) does not
// keep it, and returns the value removed. A key absent or kept costs no
// copy.
func (t *Map[K, V]) Delete(k K, keep func(V) bool) (v V, ok bool) {
	if cur, found := t.Get(k); !found || keep != nil && keep(cur) {
		return v, false
	}
	t.Update(k, func(m map[K]V) {
		if v, ok = m[k]; ok && keep != nil && keep(v) {
			var zero V
			v, ok = zero, false
		}
		if ok {
			delete(m, k)
		}
	})
	return v, ok
}

// Drain removes every entry and returns the values.
func (t *Map[K, V]) Drain() []V {
	var all []V
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		if p := s.m.Load(); p != nil {
			for _, v := range *p {
				all = append(all, v)
			}
		}
		s.m.Store(nil)
		s.mu.Unlock()
	}
	return all
}
