package capture

import (
	"hash/maphash"
	"sync"

	"github.com/retrace-dev/retrace/internal/cowmap"
)

// inConnTable maps inbound connection ids to their sessions in progress,
// sharded so that connections on many goroutines rarely contend for one
// lock. Every use of it writes (see sessionIndex for the map that is mostly
// read).
type inConnTable struct {
	shards [64]struct {
		mu sync.Mutex
		m  map[uint64]*active
		_  [48]byte // keep shards on separate cache lines
	}
}

// locked runs f with the shard of conn locked: f may read and change the
// entry of conn in m.
func (t *inConnTable) locked(conn uint64, f func(m map[uint64]*active)) {
	s := &t.shards[(conn*0x9E3779B97F4A7C15)>>58]
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[uint64]*active{}
	}
	f(s.m)
}

// sessionIndex maps trace ids to the sessions in progress. Every recorded
// call looks its session up, and so do the request's reads and writes (a
// dozen lookups or more per request, from both cores): the index is a
// cowmap.Small keyed by the id's hash, so a lookup takes no lock and
// writes nothing shared. Its writers, a session's start and end, copy a
// shard's few entries.
//
// Two ids of one 64-bit hash are never in progress at once: putNew refuses
// the second, as it refuses an id in progress (StartRequest then draws a
// new one).
type sessionIndex struct {
	m cowmap.Small[uint64, *active]
}

// get returns the session of id in progress, or nil.
func (x *sessionIndex) get(id string) *active {
	if a, ok := x.m.Get(hashString(id)); ok && a.id == id {
		return a
	}
	return nil
}

// putNew adds a under a.id unless that id (or its hash) is taken; it
// reports whether it did.
func (x *sessionIndex) putNew(a *active) (stored bool) {
	x.m.Update(hashString(a.id), func(cur *active, taken bool) (*active, bool) {
		if taken {
			return cur, true
		}
		stored = true
		return a, true
	})
	return stored
}

// remove takes a out, if it is in.
func (x *sessionIndex) remove(a *active) {
	x.m.Update(hashString(a.id), func(cur *active, ok bool) (*active, bool) {
		return cur, ok && cur != a
	})
}

// drain takes every session out and returns them.
func (x *sessionIndex) drain() []*active { return x.m.Drain() }

// hashString is the runtime's string hash (AES-based where the CPU has
// it): a few instructions for a trace id, where a byte loop took dozens.
func hashString(s string) uint64 { return maphash.String(hashSeed, s) }

var hashSeed = maphash.MakeSeed()
