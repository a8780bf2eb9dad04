package hook

import (
	"fmt"
	"reflect"
	"runtime"
	"sync"
	"unsafe"

	"github.com/agiledragon/gomonkey/v2"
)

// jumpLen is the jump's length used by the size guard (jumpSize; tests
// raise it to see the guard refuse).
var jumpLen = jumpSize

// funcValue is the layout of a reflect.Value: its pointer field holds,
// for a func, the address of a word that holds the code address.
type funcValue struct {
	_ uintptr
	p unsafe.Pointer
}

// codeWord returns the address of the word holding fn's code address.
func codeWord(fn reflect.Value) unsafe.Pointer {
	return (*funcValue)(unsafe.Pointer(&fn)).p
}

// funcOf makes a Go func value that calls the code at *word: a func value
// is a pointer to a word holding the code address (plus closure data,
// unused here). F must have the ABI of the code: same argument and result
// layout, the receiver as first argument.
func funcOf[F any](word unsafe.Pointer) F {
	var f F
	*(*unsafe.Pointer)(unsafe.Pointer(&f)) = word
	return f
}

// fitsJump reports, using the runtime's function table, whether n bytes
// written at pc stay inside the function whose entry is pc. Bytes after a
// function's last instruction up to the next function's entry (alignment
// padding) belong to it in the table and are never executed.
func fitsJump(pc uintptr, n int) error {
	if n <= 0 {
		return fmt.Errorf("%w: no jump is known for %s/%s", ErrUnsupported, runtime.GOOS, runtime.GOARCH)
	}
	f := runtime.FuncForPC(pc)
	if f == nil || f.Entry() != pc {
		return fmt.Errorf("%#x is not the entry of a function", pc)
	}
	if last := runtime.FuncForPC(pc + uintptr(n) - 1); last == nil || last.Entry() != pc {
		next := "the end of the text"
		if last != nil {
			next = last.Name()
		}
		return fmt.Errorf("%s is shorter than the %d-byte jump: it would overwrite %s", f.Name(), n, next)
	}
	return nil
}

// sameABI checks that the double's signature has the layout of the
// target's, so the jump lands in a function that reads the same registers
// and stack slots. Pointer types may differ (the double cannot name
// unexported types); sizes and pointer-ness may not.
func sameABI(target, double reflect.Type) error {
	if target.NumIn() != double.NumIn() || target.NumOut() != double.NumOut() {
		return fmt.Errorf("double %v does not match %v", double, target)
	}
	same := func(a, b reflect.Type) bool {
		ptr := func(t reflect.Type) bool {
			return t.Kind() == reflect.Pointer || t.Kind() == reflect.UnsafePointer
		}
		if ptr(a) || ptr(b) {
			return ptr(a) && ptr(b)
		}
		return a == b
	}
	for i := 0; i < target.NumIn(); i++ {
		if !same(target.In(i), double.In(i)) {
			return fmt.Errorf("double %v does not match %v (argument %d)", double, target, i)
		}
	}
	for i := 0; i < target.NumOut(); i++ {
		if !same(target.Out(i), double.Out(i)) {
			return fmt.Errorf("double %v does not match %v (result %d)", double, target, i)
		}
	}
	return nil
}

// target is one function to patch.
type target struct {
	name   string         // the function's runtime name, checked before patching
	word   unsafe.Pointer // address of a word holding its code address
	typ    reflect.Type   // its signature, receiver first; nil skips the ABI check
	double any            // the replacement, a top-level func
}

// apply patches t after checking that it is the function it claims to be
// and that the jump fits. A panic inside gomonkey (mprotect refused, W^X)
// is turned into an error. undo is safe to call more than once.
func apply(t target) (undo func(), err error) {
	pc := *(*uintptr)(t.word)
	f := runtime.FuncForPC(pc)
	if f == nil || f.Name() != t.name {
		got := "nothing"
		if f != nil {
			got = f.Name()
		}
		return nil, fmt.Errorf("%s: code pointer leads to %s", t.name, got)
	}
	if err := fitsJump(pc, jumpLen); err != nil {
		return nil, err
	}
	d := reflect.ValueOf(t.double)
	if t.typ != nil {
		if err := sameABI(t.typ, d.Type()); err != nil {
			return nil, fmt.Errorf("%s: %w", t.name, err)
		}
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s: %v", t.name, r)
		}
	}()
	p := gomonkey.NewPatches()
	p.ApplyCoreOnlyForPrivateMethod(t.word, d)
	var once sync.Once
	return func() {
		once.Do(func() {
			defer func() {
				if r := recover(); r != nil {
					counters.failures.Add(1)
				}
			}()
			p.Reset()
		})
	}, nil
}
