//go:build !amd64 && !arm64

package goid

// Stack reports false: the goroutine structure is not read on this
// platform.
func Stack() (lo, hi uintptr, ok bool) { return 0, 0, false }
