// Package goid reads facts about the calling goroutine off the Go runtime,
// starting with its id ([Get]).
//
// The id is what retrace keys goroutine → trace bindings on (package trace).
// Nothing here allocates or takes a lock; every function is safe to call
// from any goroutine, including from hooks installed on net.Conn methods.
package goid
