package stripe

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestZero(t *testing.T) {
	var c Counter
	assert.Zero(t, c.Load())
	c.Add(5)
	c.Add(-2)
	assert.EqualValues(t, 3, c.Load())
}

// Many goroutines on every processor add at once; none of their adds is
// lost, whichever cell it went to.
func TestConcurrentAdds(t *testing.T) {
	var c Counter
	const goroutines, adds = 64, 5000
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range adds {
				c.Add(int64(g%3 + i%2))
				if i%500 == 0 {
					runtime.Gosched() // move between processors
				}
			}
		})
	}
	// reads while adds are in flight never see more than was added
	for range 100 {
		n := c.Load()
		assert.GreaterOrEqual(t, n, int64(0))
	}
	wg.Wait()
	var want int64
	for g := range goroutines {
		for i := range adds {
			want += int64(g%3 + i%2)
		}
	}
	assert.Equal(t, want, c.Load())
}

// Each cell's value is at least cellSize bytes from the next one and from
// anything before or after the Counter.
func TestLayout(t *testing.T) {
	var c Counter
	first := uintptr(unsafe.Pointer(&c.c[0].n)) - uintptr(unsafe.Pointer(&c))
	assert.GreaterOrEqual(t, first, uintptr(cellSize))
	assert.Equal(t, uintptr(cellSize), unsafe.Sizeof(cell{}))
	last := unsafe.Sizeof(c) - (uintptr(unsafe.Pointer(&c.c[cells-1].n)) - uintptr(unsafe.Pointer(&c)))
	assert.GreaterOrEqual(t, last, uintptr(cellSize))
	assert.Zero(t, cells&(cells-1), "cells must be a power of two")
}

// BenchmarkAdd compares a Counter with one atomic.Int64 that every
// goroutine adds to, with a little work of their own between adds, as a
// request would do.
func BenchmarkAdd(b *testing.B) {
	work := func(pb *testing.PB, add func()) {
		var x uint64
		for pb.Next() {
			add()
			for i := range 100 {
				x = x*31 + uint64(i)
			}
		}
		sink.Add(x)
	}
	b.Run("atomic", func(b *testing.B) {
		var n atomic.Int64
		b.RunParallel(func(pb *testing.PB) { work(pb, func() { n.Add(1) }) })
	})
	b.Run("stripe", func(b *testing.B) {
		var c Counter
		b.RunParallel(func(pb *testing.PB) { work(pb, func() { c.Add(1) }) })
	})
	b.Run("none", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) { work(pb, func() {}) })
	})
}

var sink atomic.Uint64
