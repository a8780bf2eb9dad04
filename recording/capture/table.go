package capture

import (
	"hash/maphash"
	"sync"
)

// table is a map sharded by a hash of its key, so that connections and
// requests on many goroutines rarely contend for one lock.
type table[K comparable, V any] struct {
	hash   func(K) uint64
	shards [64]tableShard[K, V]
}

type tableShard[K comparable, V any] struct {
	mu sync.RWMutex
	m  map[K]V
	_  [40]byte // keep shards on separate cache lines
}

func newTable[K comparable, V any](hash func(K) uint64) *table[K, V] {
	t := &table[K, V]{hash: hash}
	for i := range t.shards {
		t.shards[i].m = map[K]V{}
	}
	return t
}

func (t *table[K, V]) shard(k K) *tableShard[K, V] {
	return &t.shards[(t.hash(k)*0x9E3779B97F4A7C15)>>58]
}

func (t *table[K, V]) get(k K) (V, bool) {
	s := t.shard(k)
	s.mu.RLock()
	v, ok := s.m[k]
	s.mu.RUnlock()
	return v, ok
}

// putNew stores v under k unless k is present; it reports whether it stored.
func (t *table[K, V]) putNew(k K, v V) bool {
	s := t.shard(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[k]; ok {
		return false
	}
	s.m[k] = v
	return true
}

// takeIf removes k unless keep says its value stays.
func (t *table[K, V]) takeIf(k K, keep func(V) bool) (V, bool) {
	s := t.shard(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[k]
	if !ok || keep(v) {
		var zero V
		return zero, false
	}
	delete(s.m, k)
	return v, true
}

// locked runs f with the shard of k locked: f may read and change the
// entry of k in m.
func (t *table[K, V]) locked(k K, f func(m map[K]V)) {
	s := t.shard(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s.m)
}

// all returns every value.
func (t *table[K, V]) all() []V {
	var out []V
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.RLock()
		for _, v := range s.m {
			out = append(out, v)
		}
		s.mu.RUnlock()
	}
	return out
}

func hashU64(k uint64) uint64 { return k }

// hashString is the runtime's string hash (AES-based where the CPU has
// it): a few instructions for a trace id, where a byte loop took dozens.
func hashString(s string) uint64 { return maphash.String(hashSeed, s) }

var hashSeed = maphash.MakeSeed()
