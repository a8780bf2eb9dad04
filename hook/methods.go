package hook

import (
	"reflect"
	"unsafe"
)

// The runtime's type data, as far as methodWord reads it (internal/abi of
// Go 1.22 to 1.26: abi.Type, abi.PtrType, abi.UncommonType, abi.Method).
// The name check of every target (checkName) catches a layout that moved.
type (
	abiType struct {
		size, ptrBytes uintptr
		hash           uint32
		tflag          uint8
		align, falign  uint8
		kind           uint8
		equal          unsafe.Pointer
		gcData         unsafe.Pointer
		str, ptrToThis int32
	}
	abiPtrType struct {
		abiType
		elem unsafe.Pointer
	}
	abiUncommon struct {
		pkgPath        int32
		mcount, xcount uint16
		moff           uint32
		_              uint32
	}
	abiMethod struct{ name, mtyp, ifn, tfn int32 }
)

const tflagUncommon = 1 << 0

//go:linkname resolveNameOff reflect.resolveNameOff
func resolveNameOff(ptrInModule unsafe.Pointer, off int32) unsafe.Pointer

//go:linkname resolveTextOff reflect.resolveTextOff
func resolveTextOff(rtype unsafe.Pointer, off int32) unsafe.Pointer

// methodWord returns a word holding the code pointer of the method name
// (exported or not) of the pointer type t, the way a func value holds it,
// or nil. It walks the type's method table itself: reflect's
// Type.MethodByName with a name the linker cannot see (and gomonkey's
// creflect, which calls it) makes the linker keep every exported method of
// every type in the program, megabytes in a service binary.
func methodWord(t reflect.Type, name string) unsafe.Pointer {
	if t.Kind() != reflect.Pointer {
		return nil
	}
	rt := (*abiPtrType)((*[2]unsafe.Pointer)(unsafe.Pointer(&t))[1]) // the *rtype in the interface
	if rt.tflag&tflagUncommon == 0 {
		return nil
	}
	type withUncommon struct {
		abiPtrType
		u abiUncommon
	}
	u := &(*withUncommon)(unsafe.Pointer(rt)).u
	methods := unsafe.Slice((*abiMethod)(unsafe.Add(unsafe.Pointer(u), u.moff)), u.mcount)
	for _, m := range methods {
		if nameAt(resolveNameOff(unsafe.Pointer(rt), m.name)) != name {
			continue
		}
		code := resolveTextOff(unsafe.Pointer(rt), m.tfn)
		return unsafe.Pointer(&code)
	}
	return nil
}

// nameAt reads an abi.Name: a flags byte, the length as a varint, the bytes.
func nameAt(p unsafe.Pointer) string {
	if p == nil {
		return ""
	}
	n, shift, i := 0, 0, 1
	for {
		b := *(*byte)(unsafe.Add(p, i))
		i++
		n |= int(b&0x7f) << shift
		if b&0x80 == 0 {
			break
		}
		shift += 7
	}
	return unsafe.String((*byte)(unsafe.Add(p, i)), n)
}
