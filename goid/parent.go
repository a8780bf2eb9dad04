//go:build amd64 || arm64

package goid

import (
	"sync"
	"sync/atomic"
	"unsafe"
)

// getg returns the runtime's g of the calling goroutine (g_*.s).
func getg() unsafe.Pointer

// Parent returns the id of the goroutine that started the calling one, as
// recorded by the runtime (runtime.g.parentGoid), and true; or 0 and false
// when the field could not be located on this runtime.
//
// The runtime does not export the field, and its offset changes between Go
// releases, so it is not hard-coded: the first call finds the one word of
// the goroutine structure that holds the creating goroutine's id in several
// freshly started goroutines with distinct parents, and uses it only if
// exactly one offset matches every time. Later calls cost a load.
//
// The parent may have exited; its id is still not reused.
func Parent() (int64, bool) {
	off := parentOff.Load()
	if off == 0 {
		searchOnce.Do(func() { parentOff.Store(int64(findParentOffset())) })
		off = parentOff.Load()
	}
	if off < 0 {
		return 0, false
	}
	return *(*int64)(unsafe.Add(getg(), off)), true
}

var (
	// parentOff is the byte offset of parentGoid in runtime.g: 0 before
	// the search, -1 when it failed.
	parentOff  atomic.Int64
	searchOnce sync.Once
)

// The search looks at words of the goroutine structure only up to
// scanWords after the goroutine id, well inside the structure (runtime.g
// is several hundred bytes; parentGoid follows goid by about 128 bytes in
// Go 1.21–1.26).
const scanWords = 40

// findParentOffset returns the byte offset of parentGoid in runtime.g, or
// -1 if it cannot be found unambiguously.
func findParentOffset() int {
	idOff := goidOffset()
	if idOff < 0 {
		return -1
	}
	const trials = 6
	var cand []int
	for trial := 0; trial < trials; trial++ {
		// Parent and child both fresh: distinct ids every trial.
		ch := make(chan []int)
		go func() {
			parent := Get()
			go func() {
				g := getg()
				var hits []int
				for w := 1; w <= scanWords; w++ {
					off := idOff + 8*w
					if *(*int64)(unsafe.Add(g, off)) == parent {
						hits = append(hits, off)
					}
				}
				ch <- hits
			}()
		}()
		hits := <-ch
		if trial == 0 {
			cand = hits
			continue
		}
		cand = intersect(cand, hits)
	}
	if len(cand) != 1 {
		return -1
	}
	return cand[0]
}

// goidOffset returns the byte offset of goid in runtime.g: the one word
// among the first 256 bytes equal to Get() in several goroutines.
func goidOffset() int {
	var cand []int
	for trial := 0; trial < 4; trial++ {
		ch := make(chan []int)
		go func() {
			g, id := getg(), Get()
			var hits []int
			for off := 0; off < 256; off += 8 {
				if *(*int64)(unsafe.Add(g, off)) == id {
					hits = append(hits, off)
				}
			}
			ch <- hits
		}()
		hits := <-ch
		if trial == 0 {
			cand = hits
		} else {
			cand = intersect(cand, hits)
		}
	}
	if len(cand) != 1 {
		return -1
	}
	return cand[0]
}

func intersect(a, b []int) []int {
	var out []int
	for _, x := range a {
		for _, y := range b {
			if x == y {
				out = append(out, x)
			}
		}
	}
	return out
}
