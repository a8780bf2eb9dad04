// Package patches is the retrace agent's one-line integration:
//
//	import _ "github.com/retrace-dev/retrace/patches"
//
// in a service's main package. At init it reads the environment once
// (DESIGN.md 3.1: RETRACE_MODE, RETRACE_MOCK_ADDR, RETRACE_PASSTHROUGH,
// RETRACE_BAFFLE, RETRACE_REWRITE, RETRACE_LOG, and in record mode the
// recording variables) and installs the
// hooks of package hook for the mode. With RETRACE_MODE unset or "off"
// nothing is patched. A bad value is reported once on standard error and
// the agent stays off; the service is never stopped by retrace.
//
// Programs that prefer code to the environment call Start with a
// hook.Config and get a stop function back.
package patches
