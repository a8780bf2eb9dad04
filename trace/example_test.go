package trace_test

import (
	"fmt"

	"github.com/retrace-dev/retrace/trace"
	"golang.org/x/sync/errgroup"
)

func ExampleBind() {
	release := trace.Bind(&trace.Trace{ID: "rec-42"})
	defer release()

	// Goroutines the handler starts see the trace, with no change to
	// their code.
	var g errgroup.Group
	g.Go(func() error {
		fmt.Println("worker sees", trace.CurrentID())
		return nil
	})
	_ = g.Wait()
	// Output: worker sees rec-42
}

func ExampleInboundParser() {
	var p trace.InboundParser
	onRequest := func(h trace.RequestHead, start int) {
		fmt.Printf("%s %s trace=%s replay=%d starts at %d\n",
			h.Method, h.Path, h.TraceID, h.ReplayTime.UnixNano(), start)
	}
	// The header arrives split across two reads.
	out := p.Feed(nil, []byte("GET /stock HTTP/1.1\r\nHost: shop\r\nRetrace-Tr"), onRequest)
	out = p.Feed(out, []byte("ace-Id: rec-42\r\nRetrace-Replay-Time: 1764411323000000000\r\n\r\n"), onRequest)
	fmt.Printf("%q\n", out)
	// Output:
	// GET /stock trace=rec-42 replay=1764411323000000000 starts at 0
	// "GET /stock HTTP/1.1\r\nHost: shop\r\n\r\n"
}
