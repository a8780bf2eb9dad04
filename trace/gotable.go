package trace

import (
	"sync"
	"sync/atomic"
)

// goTable maps goroutine ids to the binding made on that goroutine.
//
// It is read on every hooked Read and Write of the service, so lookups take
// no lock and allocate nothing: each shard publishes an immutable slice
// through an atomic pointer, and writers (Bind, release) copy the shard's
// slice under the shard's mutex and publish the copy. Shards keep copies
// short: with n live bindings a write copies about n/goShards entries.
// Goroutine ids are handed out in consecutive runs per P, so the low bits
// spread them evenly.
type goTable struct {
	shards [goShards]goShard
}

const goShards = 256

type goShard struct {
	mu      sync.Mutex // serialises writers; readers never take it
	entries atomic.Pointer[[]goEntry]
	_       [48]byte // keep shards on separate cache lines
}

type goEntry struct {
	goid int64
	b    *binding
}

func (t *goTable) shard(goid int64) *goShard { return &t.shards[uint64(goid)%goShards] }

// get returns the binding stored for goid, or nil.
func (t *goTable) get(goid int64) *binding {
	p := t.shard(goid).entries.Load()
	if p == nil {
		return nil
	}
	for _, e := range *p {
		if e.goid == goid {
			return e.b
		}
	}
	return nil
}

// swap stores b for goid (deleting the entry when b is nil) and returns the
// binding it replaced.
func (t *goTable) swap(goid int64, b *binding) (old *binding) {
	s := t.shard(goid)
	s.mu.Lock()
	defer s.mu.Unlock()
	var cur []goEntry
	if p := s.entries.Load(); p != nil {
		cur = *p
	}
	next := make([]goEntry, 0, len(cur)+1)
	for _, e := range cur {
		if e.goid == goid {
			old = e.b
			continue
		}
		next = append(next, e)
	}
	if b != nil {
		next = append(next, goEntry{goid, b})
	}
	if len(next) == 0 {
		s.entries.Store(nil)
	} else {
		s.entries.Store(&next)
	}
	return old
}

// replaceIf stores b for goid only while the entry is still want (nil b
// deletes it). It reports whether it changed anything.
func (t *goTable) replaceIf(goid int64, want, b *binding) bool {
	s := t.shard(goid)
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.entries.Load()
	if p == nil {
		return false
	}
	cur := *p
	at := -1
	for i, e := range cur {
		if e.goid == goid && e.b == want {
			at = i
			break
		}
	}
	if at < 0 {
		return false
	}
	next := make([]goEntry, 0, len(cur))
	next = append(next, cur[:at]...)
	next = append(next, cur[at+1:]...)
	if b != nil {
		next = append(next, goEntry{goid, b})
	}
	if len(next) == 0 {
		s.entries.Store(nil)
	} else {
		s.entries.Store(&next)
	}
	return true
}

// len counts the entries of all shards (for tests).
func (t *goTable) len() int {
	n := 0
	for i := range t.shards {
		if p := t.shards[i].entries.Load(); p != nil {
			n += len(*p)
		}
	}
	return n
}
