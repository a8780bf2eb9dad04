package capture

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSessionIndex(t *testing.T) {
	var x sessionIndex
	a := &active{id: "t1"}
	require.True(t, x.putNew(a))
	assert.Same(t, a, x.get("t1"))
	assert.Nil(t, x.get("t2"))
	assert.Nil(t, x.get(""))

	b := &active{id: "t1"}
	assert.False(t, x.putNew(b), "an id in progress is refused")
	x.remove(b) // not the one in: nothing happens
	assert.Same(t, a, x.get("t1"))

	c := &active{id: "t2"}
	require.True(t, x.putNew(c))
	x.remove(a)
	assert.Nil(t, x.get("t1"))
	assert.Same(t, c, x.get("t2"))
	x.remove(a) // twice: nothing happens

	require.True(t, x.putNew(b), "a removed id can be taken again")
	assert.ElementsMatch(t, []*active{b, c}, x.drain())
	assert.Nil(t, x.get("t1"))
	assert.Empty(t, x.drain())
}

// TestSessionIndexConcurrent starts, looks up and ends sessions from many
// goroutines: each finds its own session and no other's.
func TestSessionIndexConcurrent(t *testing.T) {
	var x sessionIndex
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 500 {
				a := &active{id: fmt.Sprintf("g%d-%d", g, i%7)}
				if !assert.True(t, x.putNew(a)) {
					return
				}
				for range 3 {
					if !assert.Same(t, a, x.get(a.id)) {
						return
					}
				}
				x.remove(a)
				if !assert.Nil(t, x.get(a.id)) {
					return
				}
			}
		})
	}
	wg.Wait()
	assert.Empty(t, x.drain())
}

// BenchmarkSessionLookup looks sessions up by trace id from every core, as
// each recorded call and each inbound read and write does: the
// sessionIndex against a map sharded under RWMutexes (the recorder's
// table until the index replaced it), whose every lookup writes the
// shard's reader count.
func BenchmarkSessionLookup(b *testing.B) {
	const sessions = 16
	var x sessionIndex
	var rw rwShards
	ids := make([]string, sessions)
	for i := range ids {
		ids[i] = fmt.Sprintf("%032x", i*7919)
		a := &active{id: ids[i]}
		x.putNew(a)
		rw.put(ids[i], a)
	}
	for _, bc := range []struct {
		name string
		get  func(string) *active
	}{{"rwmutex", rw.get}, {"index", x.get}} {
		b.Run(bc.name, func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					if bc.get(ids[i%sessions]) == nil {
						b.Error("missing")
						return
					}
					i++
				}
			})
		})
	}
}

// rwShards is BenchmarkSessionLookup's baseline.
type rwShards struct {
	shards [64]struct {
		mu sync.RWMutex
		m  map[string]*active
		_  [40]byte
	}
}

func (t *rwShards) put(id string, a *active) {
	s := &t.shards[hashString(id)>>58]
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]*active{}
	}
	s.m[id] = a
}

func (t *rwShards) get(id string) *active {
	s := &t.shards[hashString(id)>>58]
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.m[id]
}
