package load

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Shard selects the part of the input one worker runs: shard Index of Count
// (0 ≤ Index < Count). The zero value (and Count ≤ 1) is the whole input.
type Shard struct {
	Index, Count int
}

// ParseShard parses "I/N".
func ParseShard(s string) (Shard, error) {
	a, b, ok := strings.Cut(s, "/")
	i, err1 := strconv.Atoi(a)
	n, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || n < 1 || i < 0 || i >= n {
		return Shard{}, fmt.Errorf("bad shard %q (want I/N with 0 <= I < N, e.g. 0/4)", s)
	}
	return Shard{Index: i, Count: n}, nil
}

// String formats s as ParseShard reads it.
func (s Shard) String() string {
	if s.Count <= 1 {
		return "0/1"
	}
	return fmt.Sprintf("%d/%d", s.Index, s.Count)
}

// Name is the directory name of the shard's results: "shard-0-of-4".
func (s Shard) Name() string {
	if s.Count <= 1 {
		return "shard-0-of-1"
	}
	return fmt.Sprintf("shard-%d-of-%d", s.Index, s.Count)
}

// Owns reports whether the request at 0-based input position index belongs
// to the shard. The choice hashes the index, so it depends on nothing but
// the input order: every shard agrees, no two own the same request, and
// consecutive requests spread over all shards (a burst is shared).
func (s Shard) Owns(index int64) bool {
	if s.Count <= 1 {
		return true
	}
	return int(mix64(uint64(index))%uint64(s.Count)) == s.Index
}

// Offset is the shard's start offset, Index·stagger/Count, so that shards
// started together do not fire their first requests at the same instant.
func (s Shard) Offset(stagger time.Duration) time.Duration {
	if s.Count <= 1 {
		return 0
	}
	return time.Duration(int64(stagger) * int64(s.Index) / int64(s.Count))
}

// mix64 is the splitmix64 finaliser: a bijection of uint64 whose low bits
// depend on every input bit.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
