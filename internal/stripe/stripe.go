// Package stripe counts events that many goroutines add to at once, such
// as every request a service serves, without making the cores that serve
// them take turns at one cache line.
//
// An atomic.Int64 that every request adds to moves its cache line from
// core to core on nearly every Add once more than one core serves
// requests: about 40 ns more per Add on a two-core VM (BenchmarkAdd), and
// cores queueing for the line on a large machine. A Counter keeps
// one cell per processor (P) of the Go scheduler, each on lines of its own,
// and adds them up when it is read.
package stripe

import (
	"sync/atomic"
	_ "unsafe" // go:linkname
)

// cells is the number of cells of a Counter, a power of two. Processors
// beyond it share cells, which is correct, only less spread out.
const cells = 32

// cellSize keeps each cell's value at least 128 bytes from any other
// value: processors that prefetch the adjacent 64-byte line along with the
// one they load would otherwise take two cells' lines at once.
const cellSize = 128

type cell struct {
	n atomic.Int64
	_ [cellSize - 8]byte
}

// Counter is a cumulative count. The zero value is ready to use; it takes
// about 4 KiB and must not be copied after first use.
type Counter struct {
	// the leading pad keeps the first cell away from whatever precedes the
	// Counter in memory; each cell's own pad does the same for the next
	_ [cellSize]byte
	c [cells]cell
}

// Add adds n to the count. It never blocks.
func (c *Counter) Add(n int64) {
	// The processor's id only chooses the cell: the add is atomic, so a
	// goroutine that moves to another processor in between (it cannot
	// while pinned, but may right after) only lands in another cell.
	p := procPin()
	procUnpin()
	c.c[p&(cells-1)].n.Add(n)
}

// Load returns the count: the sum of the cells, each read atomically. Adds
// that run concurrently with it may or may not be included.
func (c *Counter) Load() int64 {
	var sum int64
	for i := range c.c {
		sum += c.c[i].n.Load()
	}
	return sum
}

// procPin and procUnpin are the runtime's, as sync.Pool uses them: procPin
// returns the id of the processor running the goroutine and keeps the
// goroutine on it until procUnpin. The runtime keeps both reachable
// through go:linkname.
//
//go:linkname procPin runtime.procPin
func procPin() int

//go:linkname procUnpin runtime.procUnpin
func procUnpin()
