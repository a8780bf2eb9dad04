package hook

import (
	"bytes"
	"errors"
	"log/slog"
	"net"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
)

//go:noinline
func tinyFunc() int { return 1 }

func tinyDouble() int { return 2 }

// span measures, with the runtime's function table, how many bytes from pc
// belong to the function whose entry is pc.
func span(pc uintptr) int {
	n := 1
	for {
		f := runtime.FuncForPC(pc + uintptr(n))
		if f == nil || f.Entry() != pc {
			return n
		}
		n++
	}
}

func TestFitsJump(t *testing.T) {
	for name, fn := range map[string]any{
		"tiny":             tinyFunc,
		"TCPConn.Read":     (*net.TCPConn).Read,
		"time.Now":         time.Now,
		"net.(*conn).Read": nil,
	} {
		var pc uintptr
		if fn == nil {
			l, err := layout()
			require.NoError(t, err)
			pc = *(*uintptr)(l.read.word)
		} else {
			pc = reflect.ValueOf(fn).Pointer()
		}
		n := span(pc)
		require.NoError(t, fitsJump(pc, n), name)
		err := fitsJump(pc, n+1)
		require.Error(t, err, name)
		require.Contains(t, err.Error(), "shorter than", name)
		t.Logf("%s: %d bytes (%s)", name, n, err)
	}
	pc := reflect.ValueOf(tinyFunc).Pointer()
	require.ErrorContains(t, fitsJump(pc+1, 1), "not the entry")
	require.ErrorIs(t, fitsJump(pc, 0), ErrUnsupported)
}

// TestApplyRefusesShortFunction: a function shorter than the jump is left
// exactly as it was.
func TestApplyRefusesShortFunction(t *testing.T) {
	pc := reflect.ValueOf(tinyFunc).Pointer()
	before := string(codeAt(pc, span(pc)))
	defer func(n int) { jumpLen = n }(jumpLen)
	jumpLen = span(pc) + 1
	word := new(uintptr)
	*word = pc
	_, err := apply(target{name: runtime.FuncForPC(pc).Name(), word: unsafe.Pointer(word), double: tinyDouble})
	require.ErrorContains(t, err, "shorter than")
	require.Equal(t, before, string(codeAt(pc, span(pc))))
	require.Equal(t, 1, tinyFunc())

	// A code pointer that does not lead to the named function is refused too.
	_, err = apply(target{name: "some.other", word: unsafe.Pointer(word), double: tinyDouble})
	require.ErrorContains(t, err, "leads to")
}

// TestInstallRefusesWhenJumpDoesNotFit: when a required function cannot be
// patched, Install reports it once, returns ErrPatch and leaves every
// function as it was.
func TestInstallRefusesWhenJumpDoesNotFit(t *testing.T) {
	l, err := layout()
	require.NoError(t, err)
	pc := *(*uintptr)(l.read.word)
	before := string(codeAt(pc, 32))
	defer func(n int) { jumpLen = n }(jumpLen)
	jumpLen = 1 << 20
	var logs bytes.Buffer
	undo, err := Install(Config{Mode: Replay, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.Nil(t, undo)
	require.True(t, errors.Is(err, ErrPatch), "%v", err)
	require.Equal(t, before, string(codeAt(pc, 32)))
	require.Equal(t, 1, strings.Count(logs.String(), "agent not installed"), logs.String())
	require.Empty(t, ReadStats().Patched)
}

// codeAt returns the n bytes of code at pc (read through a pointer-typed
// copy of pc: the text segment is not Go memory).
func codeAt(pc uintptr, n int) []byte {
	p := *(*unsafe.Pointer)(unsafe.Pointer(&pc))
	return unsafe.Slice((*byte)(p), n)
}

// TestInstallSkipsOptionalThatDoesNotFit: an optional function (the HTTP
// transport) that is shorter than the jump is reported once, listed as
// refused and left as it was; everything else is installed.
func TestInstallSkipsOptionalThatDoesNotFit(t *testing.T) {
	tt, err := transportTarget()
	require.NoError(t, err)
	rtPC := *(*uintptr)(tt.word)
	l, err := layout()
	require.NoError(t, err)
	ct, err := connectTarget()
	require.NoError(t, err)
	ck, err := clockTarget()
	require.NoError(t, err)
	gt, err := getsockoptTarget()
	require.NoError(t, err)
	rs, err := resolveTarget()
	require.NoError(t, err)
	smallest := span(rtPC)
	for _, w := range []unsafe.Pointer{l.read.word, l.write.word, l.close.word, ct.word, ck.word, gt.word, rs.word} {
		if span(*(*uintptr)(w)) <= smallest {
			t.Skipf("the transport (%d bytes) is not the shortest patched function here", smallest)
		}
	}
	defer func(n int) { jumpLen = n }(jumpLen)
	jumpLen = smallest + 1
	before := string(codeAt(rtPC, smallest))
	var logs bytes.Buffer
	undo, err := Install(Config{Mode: Replay, MockAddr: "127.0.0.1:9", NoGRPC: true, NoTLS: true, Random: RandomOff, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	defer undo()
	st := ReadStats()
	h2s, _ := h2ServeTargets() // net/http's HTTP/2 servers, as linked into the test
	require.Len(t, st.Patched, 7+len(h2s))
	require.NotContains(t, st.Patched, "net/http.(*Transport).RoundTrip")
	require.Len(t, st.Refused, 1)
	require.Contains(t, st.Refused[0], "(*Transport).RoundTrip is shorter than")
	require.Equal(t, 1, strings.Count(logs.String(), "function left unpatched"), logs.String())
	require.Equal(t, before, string(codeAt(rtPC, smallest)))
}
