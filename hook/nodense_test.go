package hook_test

import (
	"testing"

	"github.com/retrace-dev/retrace/hook"
)

// The concurrent tests again, with connections found through the map, as
// on a Go release whose net.netFD has no padding for the dense index.

func TestRecordFanOutWithoutDenseIndex(t *testing.T) {
	hook.NoDenseIndex(t)
	TestRecordFanOut(t)
}

func TestReplayFanOutWithoutDenseIndex(t *testing.T) {
	hook.NoDenseIndex(t)
	TestReplayFanOut(t)
}

func TestConcurrentWritersAndCloseWithoutDenseIndex(t *testing.T) {
	hook.NoDenseIndex(t)
	TestConcurrentWritersAndClose(t)
}

func TestUntracedSetupWritesWithoutDenseIndex(t *testing.T) {
	hook.NoDenseIndex(t)
	TestUntracedSetupWritesAreReported(t)
}
