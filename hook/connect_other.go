//go:build !linux

package hook

import (
	"fmt"
	"runtime"
)

// connectTarget: redirection hooks the connect system call, implemented
// for Linux only.
func connectTarget() (target, error) {
	return target{}, fmt.Errorf("%w: connect redirection is implemented for linux, not %s", ErrUnsupported, runtime.GOOS)
}

func getsockoptTarget() (target, error) {
	return target{}, fmt.Errorf("%w: connect outcomes are read for linux, not %s", ErrUnsupported, runtime.GOOS)
}
