//go:build amd64 || arm64

package hook

import (
	"unsafe"

	"github.com/retrace-dev/retrace/goid"
)

// callerFP returns the frame pointer of the function that calls it.
func callerFP() unsafe.Pointer

// returnPCs fills pcs with the return addresses of the calling goroutine's
// frames, innermost first, by following frame pointers (Go keeps them on
// amd64 and arm64, as the runtime's execution tracer relies on), and
// returns how many it found. Tens of times cheaper than runtime.Callers.
// The loop calls nothing, so the goroutine's stack cannot move under it,
// and it follows no frame pointer out of the goroutine's stack (the frames
// below a cgo callback are C's): it stops there, as the runtime's tracer
// does not unwind such stacks by frame pointers at all. Zero when the
// stack's bounds cannot be read.
//
//go:nosplit
func returnPCs(pcs []uintptr) int {
	lo, hi, ok := goid.Stack()
	if !ok {
		return 0
	}
	fp := callerFP()
	i := 0
	for ; i < len(pcs) && uintptr(fp) >= lo && uintptr(fp)+2*unsafe.Sizeof(uintptr(0)) <= hi; i++ {
		pcs[i] = *(*uintptr)(unsafe.Add(fp, unsafe.Sizeof(uintptr(0))))
		fp = *(*unsafe.Pointer)(fp)
	}
	return i
}
