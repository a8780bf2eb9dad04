package trace

import (
	"strings"
	"unsafe"
)

// Goroutine profiler labels are how a binding reaches the goroutines a
// handler starts: the runtime copies the creating goroutine's label pointer
// into every new goroutine (runtime.newproc1), so a label set on the
// goroutine that serves a request is inherited by its children, theirs, and
// so on, with no change to application code.
//
// The runtime keeps the labels as an unsafe.Pointer that runtime/pprof
// reads as *labelMap, a struct holding one []label.Label sorted by key
// (Go 1.24 and later, including 1.26: runtime/pprof/label.go and
// internal/runtime/pprof/label). labelSet below has the same layout, so
// profiles written by runtime/pprof show our label next to the
// application's. The accessors are reached with go:linkname, which the
// runtime explicitly keeps working (go.dev/issue/67401).

//go:linkname runtime_getProfLabel runtime/pprof.runtime_getProfLabel
func runtime_getProfLabel() unsafe.Pointer

//go:linkname runtime_setProfLabel runtime/pprof.runtime_setProfLabel
func runtime_setProfLabel(labels unsafe.Pointer)

// label and labelSet mirror internal/runtime/pprof/label.Label and .Set.
type label struct {
	key   string
	value string
}

type labelSet struct {
	list []label
}

// LabelKey is the pprof label key under which a bound trace appears in
// goroutine and CPU profiles; its value is the trace id.
const LabelKey = "retrace.trace"

// labelKey is LabelKey in memory of its own. Our label is recognised by the
// address of its key's bytes, not by their content: labels are only ever
// copied by value (pprof.Do, WithLabels), which keeps the address, while an
// application that happens to use the same key text gets its own address —
// string literals are deduplicated by the linker, so the copy must be made
// at run time.
var labelKey = strings.Clone(LabelKey)

func isOurKey(k string) bool {
	return len(k) == len(labelKey) && unsafe.StringData(k) == unsafe.StringData(labelKey)
}

// labelBinding returns the binding named by the retrace label in the label
// set ls (a runtime label pointer), or nil.
func labelBinding(ls unsafe.Pointer) *binding {
	if ls == nil {
		return nil
	}
	for _, l := range (*labelSet)(ls).list {
		if isOurKey(l.key) {
			// The value's bytes are binding.name, the first field of a
			// binding (see bindingOfName).
			return bindingOfName(l.value)
		}
	}
	return nil
}

// withLabel returns a copy of the label set ls with the retrace label set
// to value (replacing an inherited one), kept sorted by key.
func withLabel(ls unsafe.Pointer, value string) unsafe.Pointer {
	var old []label
	if ls != nil {
		old = (*labelSet)(ls).list
	}
	list := make([]label, 0, len(old)+1)
	added := false
	for _, l := range old {
		if isOurKey(l.key) || l.key == LabelKey {
			continue
		}
		if !added && l.key > LabelKey {
			list = append(list, label{labelKey, value})
			added = true
		}
		list = append(list, l)
	}
	if !added {
		list = append(list, label{labelKey, value})
	}
	return unsafe.Pointer(&labelSet{list: list})
}

// withoutLabel returns the label set ls without the retrace label of b, or
// ls itself when it holds no such label. An empty result is nil, which the
// runtime and runtime/pprof read as "no labels".
func withoutLabel(ls unsafe.Pointer, drop func(*binding) bool) unsafe.Pointer {
	if ls == nil {
		return nil
	}
	old := (*labelSet)(ls).list
	at := -1
	for i, l := range old {
		if isOurKey(l.key) && drop(bindingOfName(l.value)) {
			at = i
			break
		}
	}
	if at < 0 {
		return ls
	}
	if len(old) == 1 {
		return nil
	}
	list := make([]label, 0, len(old)-1)
	list = append(list, old[:at]...)
	list = append(list, old[at+1:]...)
	return unsafe.Pointer(&labelSet{list: list})
}
