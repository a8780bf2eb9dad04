package extract

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/retrace-dev/retrace/replayer/load"
)

// Source yields requests in the source's order. Scan calls fn for every
// request and bad for every record that does not parse (and goes on); an
// error of fn ends the scan and is returned.
type Source interface {
	Scan(ctx context.Context, fn func(*load.Request) error, bad func(BadLine)) error
}

// BadLine is a source record that was skipped.
type BadLine struct {
	Source string
	Line   int // 1-based; 0 when the source has no lines
	Err    error
}

func (b BadLine) String() string {
	if b.Line == 0 {
		return fmt.Sprintf("%s: %v", b.Source, b.Err)
	}
	return fmt.Sprintf("%s:%d: %v", b.Source, b.Line, b.Err)
}

// Options select and order what is extracted.
type Options struct {
	// From and To bound the window: From ≤ At < To. Zero values are open.
	From, To time.Time
	// ChunkSize is how many requests are sorted in memory at once; zero
	// means 100000.
	ChunkSize int
	// TempDir holds the sorted runs of inputs longer than one chunk; empty
	// means os.TempDir().
	TempDir string
	// OnBad is called for every skipped record; nil ignores them (they are
	// counted either way).
	OnBad func(BadLine)
}

// Stats count what Extract did.
type Stats struct {
	Read    int64 // requests the source yielded
	Outside int64 // of which outside the window
	Written int64
	Bad     int64 // records skipped as unparsable
	Runs    int   // sorted runs spilled to disk (0: sorted in memory)
	Sorted  bool  // the source was already in time order
}

// Extract reads src, keeps the requests of the window and writes them to w
// ordered by time (stable: requests of equal time keep the source order).
func Extract(ctx context.Context, src Source, w *load.Writer, opts Options) (Stats, error) {
	if opts.ChunkSize <= 0 {
		opts.ChunkSize = 100000
	}
	var st Stats
	st.Sorted = true
	var last time.Time
	chunk := make([]*load.Request, 0, min(opts.ChunkSize, 4096))
	var runs []*os.File
	defer func() {
		for _, f := range runs {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	spill := func() error {
		f, err := os.CreateTemp(opts.TempDir, "retrace-extract-*.jsonl")
		if err != nil {
			return fmt.Errorf("spilling a sorted run: %w", err)
		}
		runs = append(runs, f)
		if err := writeSorted(chunk, load.NewWriter(f)); err != nil {
			return fmt.Errorf("spilling a sorted run: %w", err)
		}
		chunk = chunk[:0]
		return nil
	}
	err := src.Scan(ctx, func(r *load.Request) error {
		st.Read++
		if (!opts.From.IsZero() && r.At.Before(opts.From)) || (!opts.To.IsZero() && !r.At.Before(opts.To)) {
			st.Outside++
			return nil
		}
		if r.At.Before(last) {
			st.Sorted = false
		}
		last = r.At
		chunk = append(chunk, r)
		if len(chunk) >= opts.ChunkSize {
			return spill()
		}
		return ctx.Err()
	}, func(b BadLine) {
		st.Bad++
		if opts.OnBad != nil {
			opts.OnBad(b)
		}
	})
	if err != nil {
		return st, err
	}
	if len(runs) == 0 {
		if err := writeSorted(chunk, w); err != nil {
			return st, err
		}
		st.Written = int64(len(chunk))
		return st, nil
	}
	if len(chunk) > 0 {
		if err := spill(); err != nil {
			return st, err
		}
	}
	st.Runs = len(runs)
	n, err := merge(runs, w)
	st.Written = n
	return st, err
}

func writeSorted(chunk []*load.Request, w *load.Writer) error {
	slices.SortStableFunc(chunk, func(a, b *load.Request) int { return a.At.Compare(b.At) })
	for _, r := range chunk {
		if err := w.Write(r); err != nil {
			return err
		}
	}
	return w.Flush()
}

// merge k-way merges the sorted runs into w; ties go to the earlier run,
// which holds the earlier source records, so the merge is stable.
func merge(runs []*os.File, w *load.Writer) (int64, error) {
	h := make(runHeap, 0, len(runs))
	for i, f := range runs {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return 0, err
		}
		c := &cursor{idx: i, rd: load.NewReader(f, f.Name())}
		ok, err := c.next()
		if err != nil {
			return 0, err
		}
		if ok {
			h = append(h, c)
		}
	}
	heap.Init(&h)
	var n int64
	for h.Len() > 0 {
		c := h[0]
		if err := w.Write(&c.cur); err != nil {
			return n, err
		}
		n++
		ok, err := c.next()
		if err != nil {
			return n, err
		}
		if ok {
			heap.Fix(&h, 0)
		} else {
			heap.Pop(&h)
		}
	}
	return n, w.Flush()
}

type cursor struct {
	idx int
	rd  *load.Reader
	cur load.Request
}

func (c *cursor) next() (bool, error) {
	err := c.rd.Next(&c.cur)
	if errors.Is(err, io.EOF) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading back a sorted run: %w", err)
	}
	return true, nil
}

type runHeap []*cursor

func (h runHeap) Len() int { return len(h) }
func (h runHeap) Less(i, j int) bool {
	if c := h[i].cur.At.Compare(h[j].cur.At); c != 0 {
		return c < 0
	}
	return h[i].idx < h[j].idx
}
func (h runHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *runHeap) Push(x any)   { *h = append(*h, x.(*cursor)) }
func (h *runHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
