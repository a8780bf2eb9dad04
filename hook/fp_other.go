//go:build !amd64 && !arm64

package hook

import "runtime"

// returnPCs is runtime.Callers where the agent does not follow frame
// pointers (it installs nothing there anyway).
func returnPCs(pcs []uintptr) int { return runtime.Callers(1, pcs) }
