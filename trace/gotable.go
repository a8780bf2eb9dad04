package trace

import "github.com/retrace-dev/retrace/internal/cowmap"

// goTable maps goroutine ids to the binding made on that goroutine.
//
// It is read on every hooked Read and Write of the service while a trace
// is bound anywhere, so lookups take no lock and allocate nothing: a
// cowmap.Small, whose shards publish immutable lists that writers (Bind,
// release) copy, one allocation per Bind and usually none per release.
// Goroutine ids are handed out in consecutive runs per P, and the shard
// hash spreads them.
type goTable struct {
	m cowmap.Small[int64, *binding]
}

// get returns the binding stored for goid, or nil.
func (t *goTable) get(goid int64) *binding {
	b, _ := t.m.Get(goid)
	return b
}

// swap stores b for goid (deleting the entry when b is nil) and returns the
// binding it replaced.
func (t *goTable) swap(goid int64, b *binding) (old *binding) {
	t.m.Update(goid, func(cur *binding, _ bool) (*binding, bool) {
		old = cur
		return b, b != nil
	})
	return old
}

// replaceIf stores b for goid only while the entry is still want (nil b
// deletes it). It reports whether it changed anything.
func (t *goTable) replaceIf(goid int64, want, b *binding) (changed bool) {
	t.m.Update(goid, func(cur *binding, ok bool) (*binding, bool) {
		if !ok || cur != want {
			return cur, ok
		}
		changed = true
		return b, b != nil
	})
	return changed
}

// len counts the entries (for tests).
func (t *goTable) len() int { return t.m.Len() }
