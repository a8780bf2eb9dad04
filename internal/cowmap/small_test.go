package cowmap

import (
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sameShard returns n keys of one shard of a Small.
func sameShard(n int) []uint64 {
	var tb Small[uint64, int]
	var keys []uint64
	for k := uint64(1); len(keys) < n; k++ {
		if tb.shard(k) == tb.shard(1) {
			keys = append(keys, k)
		}
	}
	return keys
}

func set(tb *Small[uint64, int], k uint64, v int) {
	tb.Update(k, func(int, bool) (int, bool) { return v, true })
}

func del(tb *Small[uint64, int], k uint64) {
	tb.Update(k, func(int, bool) (int, bool) { return 0, false })
}

func TestSmall(t *testing.T) {
	var tb Small[uint64, int]
	_, ok := tb.Get(1)
	assert.False(t, ok, "empty")

	// one shard holding more entries than fit in place, added, replaced and
	// removed in every position
	keys := sameShard(7)
	for i, k := range keys {
		set(&tb, k, i)
	}
	require.Equal(t, 7, tb.Len())
	for i, k := range keys {
		v, ok := tb.Get(k)
		assert.True(t, ok)
		assert.Equal(t, i, v)
	}
	set(&tb, keys[5], 50)
	v, _ := tb.Get(keys[5])
	assert.Equal(t, 50, v, "replaced past the entries in place")
	for _, i := range []int{1, 6, 0} {
		del(&tb, keys[i])
		_, ok := tb.Get(keys[i])
		assert.False(t, ok, "deleted %d", i)
	}
	assert.Equal(t, 4, tb.Len())
	for _, i := range []int{2, 3, 4} {
		v, ok := tb.Get(keys[i])
		assert.True(t, ok)
		assert.Equal(t, i, v, "left alone by the deletes")
	}

	// f sees the value, and an update that changes nothing copies nothing
	before := tb.shard(keys[2]).list.Load()
	tb.Update(keys[2], func(old int, ok bool) (int, bool) {
		assert.True(t, ok)
		assert.Equal(t, 2, old)
		return old, true
	})
	tb.Update(12345678, func(old int, ok bool) (int, bool) {
		assert.False(t, ok)
		return 0, false
	})
	assert.Same(t, before, tb.shard(keys[2]).list.Load())

	got := tb.Drain()
	slices.Sort(got)
	assert.Equal(t, []int{2, 3, 4, 50}, got)
	assert.Zero(t, tb.Len())
	_, ok = tb.Get(keys[2])
	assert.False(t, ok, "drained")
}

// TestSmallConcurrent: goroutines set, read and delete their own keys, some
// of them in one shard, while others do the same (run with -race); each
// always reads its own value.
func TestSmallConcurrent(t *testing.T) {
	var tb Small[uint64, int]
	keys := sameShard(8)
	var wg sync.WaitGroup
	for g, k := range keys {
		wg.Go(func() {
			for i := range 2000 {
				set(&tb, k, g*10000+i)
				v, ok := tb.Get(k)
				if !assert.True(t, ok) || !assert.Equal(t, g*10000+i, v) {
					return
				}
				if i%3 == 0 {
					del(&tb, k)
					if _, ok := tb.Get(k); !assert.False(t, ok) {
						return
					}
				}
			}
			del(&tb, k)
		})
	}
	wg.Wait()
	assert.Zero(t, tb.Len())
}

func BenchmarkSmallGet(b *testing.B) {
	var tb Small[uint64, int]
	for k := range uint64(16) {
		set(&tb, k*7919, int(k))
	}
	b.RunParallel(func(pb *testing.PB) {
		k := uint64(0)
		for pb.Next() {
			if _, ok := tb.Get((k % 16) * 7919); !ok {
				b.Error("missing")
				return
			}
			k++
		}
	})
}

func BenchmarkSmallUpdate(b *testing.B) {
	var tb Small[uint64, int]
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		k := uint64(i % 16)
		set(&tb, k, i)
		del(&tb, k)
	}
}
