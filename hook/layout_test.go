package hook

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"

	"github.com/retrace-dev/retrace/internal/testenv"
)

// An inbound request reads and writes the flags, the read side, the
// current trace and the serving state up to the binding's release: in two
// cache lines of a 64-byte aligned connState (see connState).
func TestConnStateLayout(t *testing.T) {
	testenv.Need64Bit(t)
	var st connState
	assert.Zero(t, unsafe.Sizeof(st)%64, "connState size %d", unsafe.Sizeof(st))
	assert.Less(t, unsafe.Offsetof(st.gone), uintptr(64), "flags in the first line")
	end := unsafe.Offsetof(st.srv) + unsafe.Offsetof(st.srv.release) + unsafe.Sizeof(st.srv.release)
	assert.LessOrEqual(t, end, uintptr(128), "read side and serving state in two lines")
}

// A feed reads the stream's own fields, its inline event among them, and
// the parser's first 256 bytes: the parser starts within the stream's
// second line (see stream).
func TestStreamLayout(t *testing.T) {
	testenv.Need64Bit(t)
	var s stream
	assert.LessOrEqual(t, unsafe.Offsetof(s.p), uintptr(128), "parser at %d", unsafe.Offsetof(s.p))
	assert.Less(t, unsafe.Offsetof(s.ev), unsafe.Offsetof(s.p), "inline event before the parser")
	assert.LessOrEqual(t, unsafe.Sizeof(s), uintptr(576), "stream size %d", unsafe.Sizeof(s))
}
