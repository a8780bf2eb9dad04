package capture

import (
	"sync"
	"sync/atomic"
)

// readMostly is a table for keys added and removed rarely but looked up on
// every read and write: the dialled connections. A lookup takes no lock and
// writes no shared memory, so the two cores of a connection's writer and
// reader goroutines do not pass a lock's cache line back and forth (the
// reader count of a sync.RWMutex is written by every RLock). Each shard
// publishes an immutable map through an atomic pointer; a writer copies the
// shard's map under the shard's mutex, a few entries at most.
type readMostly[K comparable, V any] struct {
	hash   func(K) uint64
	shards [64]readMostlyShard[K, V]
}

type readMostlyShard[K comparable, V any] struct {
	mu sync.Mutex // serialises writers; readers never take it
	m  atomic.Pointer[map[K]V]
	_  [48]byte // keep shards on separate cache lines
}

func newReadMostly[K comparable, V any](hash func(K) uint64) *readMostly[K, V] {
	return &readMostly[K, V]{hash: hash}
}

func (t *readMostly[K, V]) shard(k K) *readMostlyShard[K, V] {
	return &t.shards[(t.hash(k)*0x9E3779B97F4A7C15)>>58]
}

func (t *readMostly[K, V]) get(k K) (V, bool) {
	if p := t.shard(k).m.Load(); p != nil {
		v, ok := (*p)[k]
		return v, ok
	}
	var zero V
	return zero, false
}

// getOrPut returns the value of k, storing mk() first when there is none.
func (t *readMostly[K, V]) getOrPut(k K, mk func() V) V {
	if v, ok := t.get(k); ok {
		return v
	}
	s := t.shard(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.load()
	if v, ok := cur[k]; ok {
		return v
	}
	v := mk()
	next := make(map[K]V, len(cur)+1)
	for ck, cv := range cur {
		next[ck] = cv
	}
	next[k] = v
	s.m.Store(&next)
	return v
}

// take removes k and returns what it held.
func (t *readMostly[K, V]) take(k K) (V, bool) {
	s := t.shard(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.load()
	v, ok := cur[k]
	if !ok {
		return v, false
	}
	next := make(map[K]V, len(cur)-1)
	for ck, cv := range cur {
		if ck != k {
			next[ck] = cv
		}
	}
	s.m.Store(&next)
	return v, true
}

// load returns the shard's map (nil when empty); called with s.mu held.
func (s *readMostlyShard[K, V]) load() map[K]V {
	if p := s.m.Load(); p != nil {
		return *p
	}
	return nil
}
