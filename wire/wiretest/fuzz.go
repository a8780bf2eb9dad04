package wiretest

import (
	"testing"

	"github.com/retrace-dev/retrace/wire"
)

// FuzzFramers fuzzes both framers of p, seeded with every side's bytes of
// the samples: framing never panics, returns lengths within the buffer,
// and finds the same messages when the input comes in two pieces.
func FuzzFramers(f *testing.F, p wire.Protocol, samples ...Sample) {
	unframed := false
	for _, s := range samples {
		unframed = unframed || s.Unframed
		client, server, _ := streams(s)
		f.Add(client, uint16(len(client)/2), false)
		f.Add(server, uint16(len(server)/2), true)
		for _, ex := range s.Exchanges {
			f.Add(ex.Request, uint16(1), false)
			f.Add(ex.Response, uint16(3), true)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte, cut uint16, server bool) {
		side := wire.Client
		if server {
			side = wire.Server
		}
		whole, leftW, errW := frames(p.NewFramer(side, 1<<16), b)
		if unframed {
			return
		}
		at := int(cut) % (len(b) + 1)
		split, leftS, errS := frames(p.NewFramer(side, 1<<16), b, at)
		if (errW == nil) != (errS == nil) && leftW == len(b) && leftS == len(b) {
			return // an error found on a prefix only: the split saw less
		}
		if errW == nil && errS == nil && (!equal(whole, split) || leftW != leftS) {
			t.Fatalf("%s %q: whole %v (%d left), cut at %d %v (%d left)", side, b, whole, leftW, at, split, leftS)
		}
	})
}
