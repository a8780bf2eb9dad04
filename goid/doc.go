// Package goid reads facts about the calling goroutine off the Go runtime:
// its id ([Get]) and the id of the goroutine that started it ([Parent]).
//
// The id is what package trace keys goroutine → trace bindings on. Nothing
// here allocates or takes a lock after the first call; every function is
// safe to call from any goroutine, including from hooks installed on
// net.Conn methods.
//
// [Get] relies on github.com/petermattis/goid, which knows the runtime's
// layout for each Go release. [Parent] reads runtime.g.parentGoid, whose
// offset it finds and cross-checks at run time (amd64 and arm64 only); it
// reports false rather than guess when the layout does not match.
//
// Package trace does not use Parent to find a goroutine's trace: a
// goroutine started before its parent bound a request (a worker, a
// connection's reader), or one that outlives the request, would be charged
// to whatever request the parent serves at the time of the lookup. It is
// there for diagnostics.
package goid
