package hook

import "runtime"

// funcForPC returns the name of the function containing pc, or "".
func funcForPC(pc uintptr) string {
	if f := runtime.FuncForPC(pc); f != nil {
		return f.Name()
	}
	return ""
}
