package trace

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"

	"github.com/retrace-dev/retrace/internal/testenv"
)

// Current on a goroutine that carries the label reads the binding's trace
// and its own label set: one cache line, as binding's size is a multiple
// of 64 (a size class whose objects are 64-byte aligned).
func TestBindingLayout(t *testing.T) {
	testenv.Need64Bit(t)
	var b binding
	assert.Zero(t, unsafe.Sizeof(b)%64, "binding size")
	first := unsafe.Offsetof(b.trace)
	last := unsafe.Offsetof(b.own) + unsafe.Sizeof(b.own)
	assert.Equal(t, first/64, (last-1)/64, "trace and own in one line")
}
