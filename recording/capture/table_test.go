package capture

import (
	"testing"

	"github.com/retrace-dev/retrace/internal/cowmap"
)

// BenchmarkConnLookup looks dialled connections up from every core, as the
// hooks' reads and writes do: the sharded RWMutex table (which holds the
// sessions) against the cowmap.Map that holds the connections.
func BenchmarkConnLookup(b *testing.B) {
	const conns = 16
	rw := newTable[uint64, *outConn](hashU64)
	var cm cowmap.Map[uint64, *outConn]
	for id := range uint64(conns) {
		oc := &outConn{id: id}
		rw.putNew(id, oc)
		cm.Update(id, func(m map[uint64]*outConn) { m[id] = oc })
	}
	for _, bc := range []struct {
		name string
		get  func(uint64) (*outConn, bool)
	}{{"rwmutex", rw.get}, {"cowmap", cm.Get}} {
		b.Run(bc.name, func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				id := uint64(0)
				for pb.Next() {
					if _, ok := bc.get(id % conns); !ok {
						b.Error("missing")
						return
					}
					id++
				}
			})
		})
	}
}
