//go:build amd64 || arm64

package goid

import "unsafe"

// Stack returns the bounds [lo, hi) of the calling goroutine's stack
// (runtime.g.stack, the goroutine structure's first field), and whether
// they hold the caller's own frame, checked on every call: false means
// this runtime lays the structure out otherwise, and the bounds are not
// to be used. The stack moves when it grows: the bounds are those of the
// moment of the call.
//
//go:nosplit
func Stack() (lo, hi uintptr, ok bool) {
	g := getg()
	lo = *(*uintptr)(g)
	hi = *(*uintptr)(unsafe.Add(g, unsafe.Sizeof(uintptr(0))))
	var here byte
	at := uintptr(unsafe.Pointer(&here))
	return lo, hi, lo < hi && lo <= at && at < hi
}
