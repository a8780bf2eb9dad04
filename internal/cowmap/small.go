package cowmap

import (
	"sync"
	"sync/atomic"
)

// Small is a Map for keys that come and go with each request (the traces
// bound to goroutines, the sessions in progress): there are about as many
// at once as requests in progress, so a shard rarely holds more than one
// or two. Each shard publishes an immutable list instead of a map: a
// lookup scans a few entries, and a write allocates one object (none when
// it empties the shard), where a map copy takes two and a bigger copy.
//
// The zero value is empty and ready to use; a Small must not be copied.
type Small[K Key, V comparable] struct {
	shards [256]smallShard[K, V]
}

type smallShard[K Key, V comparable] struct {
	mu   sync.Mutex // serialises writers; readers never take it
	list atomic.Pointer[smallList[K, V]]
	_    [48]byte // keep shards on separate cache lines
}

// smallList is a shard's entries: the first ones in place, the rest (a
// shard of more than smallInPlace entries, rare) in more.
type smallList[K Key, V comparable] struct {
	n     int
	first [smallInPlace]smallEntry[K, V]
	more  []smallEntry[K, V]
}

const smallInPlace = 3

type smallEntry[K Key, V comparable] struct {
	k K
	v V
}

func (l *smallList[K, V]) at(i int) *smallEntry[K, V] {
	if i < smallInPlace {
		return &l.first[i]
	}
	return &l.more[i-smallInPlace]
}

func (l *smallList[K, V]) add(e smallEntry[K, V]) {
	if l.n < smallInPlace {
		l.first[l.n] = e
	} else {
		l.more = append(l.more, e)
	}
	l.n++
}

func (t *Small[K, V]) shard(k K) *smallShard[K, V] {
	return &t.shards[(uint64(k)*0x9E3779B97F4A7C15)>>56]
}

// Get returns the value stored for k.
func (t *Small[K, V]) Get(k K) (v V, ok bool) {
	l := t.shard(k).list.Load()
	if l == nil {
		return v, false
	}
	for i := range min(l.n, smallInPlace) {
		if l.first[i].k == k {
			return l.first[i].v, true
		}
	}
	for _, e := range l.more {
		if e.k == k {
			return e.v, true
		}
	}
	return v, false
}

// Update runs f with k's value (ok false when k has none) under the lock of
// k's shard, and stores what f returns: v when keep, no entry for k when
// not. A shard whose entries do not change is not copied.
func (t *Small[K, V]) Update(k K, f func(old V, ok bool) (v V, keep bool)) {
	s := t.shard(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.list.Load()
	n, at := 0, -1
	if cur != nil {
		n = cur.n
		for i := range n {
			if cur.at(i).k == k {
				at = i
				break
			}
		}
	}
	var old V
	if at >= 0 {
		old = cur.at(at).v
	}
	v, keep := f(old, at >= 0)
	switch {
	case keep == (at >= 0) && (!keep || v == old):
		return // unchanged
	case !keep && n == 1:
		s.list.Store(nil)
		return
	}
	next := &smallList[K, V]{}
	if size := n + 1 - smallInPlace; size > 0 {
		next.more = make([]smallEntry[K, V], 0, size)
	}
	for i := range n {
		if i != at {
			next.add(*cur.at(i))
		}
	}
	if keep {
		next.add(smallEntry[K, V]{k, v})
	}
	s.list.Store(next)
}

// Drain removes every entry and returns their values.
func (t *Small[K, V]) Drain() []V {
	var all []V
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		if l := s.list.Load(); l != nil {
			for j := range l.n {
				all = append(all, l.at(j).v)
			}
		}
		s.list.Store(nil)
		s.mu.Unlock()
	}
	return all
}

// Len counts the entries (for tests and gauges: it takes every shard's
// list as it is at that moment).
func (t *Small[K, V]) Len() int {
	n := 0
	for i := range t.shards {
		if l := t.shards[i].list.Load(); l != nil {
			n += l.n
		}
	}
	return n
}
