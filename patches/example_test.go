package patches_test

import (
	"context"
	"fmt"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/patches"
)

// Start installs the agent from code instead of the environment; stop
// removes every patch again.
func ExampleStart() {
	stop, err := patches.Start(hook.Config{
		Mode:        hook.Replay,
		MockAddr:    "127.0.0.1:3515",
		Passthrough: []string{"127.0.0.1:5432"},
	})
	if err != nil {
		fmt.Println("agent off:", err)
		return
	}
	fmt.Println(hook.ReadStats().Mode, len(hook.ReadStats().Patched), "functions patched")
	_ = stop(context.Background())
	fmt.Println(hook.ReadStats().Mode, len(hook.ReadStats().Patched), "functions patched")
	// Output:
	// replay 15 functions patched
	// off 0 functions patched
}
