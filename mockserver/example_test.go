package mockserver_test

import (
	"bufio"
	"context"
	"fmt"

	"github.com/retrace-dev/retrace/mockserver"
	"github.com/retrace-dev/retrace/mockserver/mocktest"
	"github.com/retrace-dev/retrace/recording"
)

// A mock server answering a line protocol (the generic adapter: one write is
// one request) for the trace of a recorded session.
func Example() {
	srv, err := mockserver.New(mockserver.Config{Listen: "127.0.0.1:0", Admin: "-",
		Strategies: []mockserver.Strategy{mockserver.StrategyHamming}})
	if err != nil {
		panic(err)
	}
	srv.AddSession(&recording.Session{V: 1, ID: "trace-1", Calls: []recording.Call{
		{Seq: 0, Proto: "raw", Dst: "10.0.0.9:7000", Request: []byte("price apple\n"), Response: []byte("apple 3\n")},
		{Seq: 1, Proto: "raw", Dst: "10.0.0.9:7000", Request: []byte("price pear\n"), Response: []byte("pear 5\n")},
	}})
	if err := srv.Start(); err != nil {
		panic(err)
	}
	defer srv.Close()

	// What the agent does for the service: frame every write with the
	// trace and the original destination.
	d := &mocktest.Dialer{Mock: srv.Addr(), TID: "trace-1"}
	c, err := d.DialContext(context.Background(), "tcp", "10.0.0.9:7000")
	if err != nil {
		panic(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for _, q := range []string{"price pear\n", "price apple\n"} {
		c.Write([]byte(q))
		a, _ := br.ReadString('\n')
		fmt.Print(a)
	}
	// Output:
	// pear 5
	// apple 3
}
