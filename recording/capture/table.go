package capture

import (
	"hash/maphash"

	"github.com/retrace-dev/retrace/internal/cowmap"
)

// sessionIndex maps trace ids to the sessions in progress. A recorded call
// looks its session up here when its connection's last call was not of the
// same session (outConn.sess), from either core: the index is a
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
