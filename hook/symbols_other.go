//go:build !linux

package hook

import (
	"fmt"
	"runtime"
)

// funcsByName finds functions by name in the executable; only on Linux.
func funcsByName(names ...string) ([]uintptr, error) {
	return nil, fmt.Errorf("%w: finding functions by name on %s", ErrUnsupported, runtime.GOOS)
}
