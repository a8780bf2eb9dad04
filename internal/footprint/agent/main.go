// Command agent is the example order service with the retrace agent.
package main

import (
	"context"
	"os"

	"github.com/retrace-dev/retrace/examples/orders"
	_ "github.com/retrace-dev/retrace/patches"
)

func main() {
	srv, err := orders.NewServer(orders.ConfigFromEnv())
	if err != nil {
		os.Exit(1)
	}
	_ = srv.ListenAndServe(context.Background(), "127.0.0.1:0", os.Stderr)
}
