package capture

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestReadMostly(t *testing.T) {
	tb := newReadMostly[uint64, string](hashU64)
	_, ok := tb.get(1)
	assert.False(t, ok, "empty table")
	made := 0
	mk := func(v string) func() string { return func() string { made++; return v } }
	assert.Equal(t, "a", tb.getOrPut(1, mk("a")))
	assert.Equal(t, "a", tb.getOrPut(1, mk("b")), "a key keeps its first value")
	assert.Equal(t, 1, made, "mk runs once per key")
	// 1 and 65 may share a shard: each keeps its own value
	assert.Equal(t, "c", tb.getOrPut(65, mk("c")))
	v, ok := tb.take(1)
	assert.True(t, ok)
	assert.Equal(t, "a", v)
	_, ok = tb.get(1)
	assert.False(t, ok, "taken")
	_, ok = tb.take(1)
	assert.False(t, ok, "taken twice")
	v, ok = tb.get(65)
	assert.True(t, ok)
	assert.Equal(t, "c", v, "a take leaves other keys alone")
}

// TestReadMostlyConcurrent races lookups against adds and takes of other
// keys (run with -race): a key present throughout is never missed.
func TestReadMostlyConcurrent(t *testing.T) {
	tb := newReadMostly[uint64, uint64](hashU64)
	for k := range uint64(64) {
		tb.getOrPut(k, func() uint64 { return k * 10 })
	}
	stop := make(chan struct{})
	var writer, readers sync.WaitGroup
	writer.Go(func() {
		for i := uint64(0); ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			k := 1000 + i%512
			tb.getOrPut(k, func() uint64 { return k })
			tb.take(k)
		}
	})
	for range 2 {
		readers.Go(func() {
			for range 2000 {
				for k := range uint64(64) {
					if v, ok := tb.get(k); !ok || v != k*10 {
						t.Errorf("get(%d) = %d, %v", k, v, ok)
						return
					}
				}
			}
		})
	}
	readers.Wait()
	close(stop)
	writer.Wait()
}

// BenchmarkConnLookup looks dialled connections up from every core, as the
// hooks' reads and writes do: the sharded RWMutex table against readMostly.
func BenchmarkConnLookup(b *testing.B) {
	const conns = 16
	rw := newTable[uint64, *outConn](hashU64)
	rm := newReadMostly[uint64, *outConn](hashU64)
	for id := range uint64(conns) {
		oc := &outConn{id: id}
		rw.getOrPut(id, func() *outConn { return oc })
		rm.getOrPut(id, func() *outConn { return oc })
	}
	for _, bc := range []struct {
		name string
		get  func(uint64) (*outConn, bool)
	}{{"rwmutex", rw.get}, {"readmostly", rm.get}} {
		b.Run(bc.name, func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				id := uint64(0)
				for pb.Next() {
					if _, ok := bc.get(id % conns); !ok {
						b.Error("missing")
						return
					}
					id++
				}
			})
		})
	}
}
