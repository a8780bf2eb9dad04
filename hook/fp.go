//go:build amd64 || arm64

package hook

import "unsafe"

// callerFP returns the frame pointer of the function that calls it.
func callerFP() unsafe.Pointer

// returnPCs fills pcs with the return addresses of the calling goroutine's
// frames, innermost first, by following frame pointers (Go keeps them on
// amd64 and arm64, as the runtime's execution tracer relies on), and
// returns how many it found. Tens of times cheaper than runtime.Callers.
// The loop calls nothing, so the goroutine's stack cannot move under it.
//
//go:nosplit
func returnPCs(pcs []uintptr) int {
	fp := callerFP()
	i := 0
	for ; i < len(pcs) && fp != nil; i++ {
		pcs[i] = *(*uintptr)(unsafe.Add(fp, unsafe.Sizeof(uintptr(0))))
		fp = *(*unsafe.Pointer)(fp)
	}
	return i
}
