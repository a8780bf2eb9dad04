package cowmap

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// put stores v under k unless k is present, and returns k's value.
func put(t *Map[uint64, string], k uint64, v string) (got string) {
	t.Update(k, func(m map[uint64]string) {
		if cur, ok := m[k]; ok {
			got = cur
			return
		}
		m[k], got = v, v
	})
	return got
}

// take removes k and returns what it held.
func take(t *Map[uint64, string], k uint64) (v string, ok bool) {
	t.Update(k, func(m map[uint64]string) {
		v, ok = m[k]
		delete(m, k)
	})
	return v, ok
}

func TestMap(t *testing.T) {
	var tb Map[uint64, string]
	_, ok := tb.Get(1)
	assert.False(t, ok, "empty map")
	assert.Equal(t, "a", put(&tb, 1, "a"))
	assert.Equal(t, "a", put(&tb, 1, "b"), "a key keeps its first value")
	// keys that may share a shard: each keeps its own value
	assert.Equal(t, "c", put(&tb, 257, "c"))
	v, ok := take(&tb, 1)
	assert.True(t, ok)
	assert.Equal(t, "a", v)
	_, ok = tb.Get(1)
	assert.False(t, ok, "taken")
	_, ok = take(&tb, 1)
	assert.False(t, ok, "taken twice")
	v, ok = tb.Get(257)
	assert.True(t, ok)
	assert.Equal(t, "c", v, "a take leaves other keys alone")
	assert.Equal(t, []string{"c"}, tb.Drain())
	_, ok = tb.Get(257)
	assert.False(t, ok, "drained")
}

// TestMapConcurrent races lookups against adds and removals of other keys
// (run with -race): a key present throughout is never missed.
func TestMapConcurrent(t *testing.T) {
	var tb Map[uint64, uint64]
	for k := range uint64(64) {
		tb.Update(k, func(m map[uint64]uint64) { m[k] = k * 10 })
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
			tb.Update(k, func(m map[uint64]uint64) { m[k] = k })
			tb.Update(k, func(m map[uint64]uint64) { delete(m, k) })
		}
	})
	for range 2 {
		readers.Go(func() {
			for range 2000 {
				for k := range uint64(64) {
					if v, ok := tb.Get(k); !ok || v != k*10 {
						t.Errorf("Get(%d) = %d, %v", k, v, ok)
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

func TestMapDelete(t *testing.T) {
	var tb Map[uint64, string]
	put(&tb, 1, "a")
	put(&tb, 2, "b")
	before := tb.shard(3).m.Load()
	_, ok := tb.Delete(3, nil)
	assert.False(t, ok, "absent")
	assert.Same(t, before, tb.shard(3).m.Load(), "an absent key costs no copy")
	_, ok = tb.Delete(1, func(v string) bool { return v == "a" })
	assert.False(t, ok, "kept")
	v, ok := tb.Get(1)
	assert.True(t, ok)
	assert.Equal(t, "a", v)
	v, ok = tb.Delete(1, func(v string) bool { return v != "a" })
	assert.True(t, ok)
	assert.Equal(t, "a", v)
	v, ok = tb.Delete(2, nil)
	assert.True(t, ok)
	assert.Equal(t, "b", v)
	assert.Empty(t, tb.Drain())
}
