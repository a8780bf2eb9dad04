package hook

import (
	"reflect"
	"testing"
)

// FuzzH2FrameWalk checks that the server's frames are found the same
// however its writes cut them.
func FuzzH2FrameWalk(f *testing.F) {
	f.Add([]byte{0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 2, 1, 5, 0, 0, 0, 1, 'h', 'i', 0, 0, 4, 3, 0, 0, 0, 0, 1, 0, 0, 0, 8}, 11)
	f.Fuzz(func(t *testing.T, b []byte, cut int) {
		type fr struct {
			typ, flags byte
			id         uint32
		}
		collect := func(pieces ...[]byte) []fr {
			var w h2FrameWalk
			var out []fr
			for _, p := range pieces {
				w.walk(p, func(typ, flags byte, id uint32) { out = append(out, fr{typ, flags, id}) })
			}
			return out
		}
		cut = min(max(cut, 0), len(b))
		whole, split := collect(b), collect(b[:cut], b[cut:])
		if !reflect.DeepEqual(whole, split) {
			t.Fatalf("whole %v, cut at %d %v", whole, cut, split)
		}
	})
}
