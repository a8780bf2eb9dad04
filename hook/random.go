package hook

import (
	crand "crypto/rand"
	"fmt"
	"io"
	"reflect"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/retrace-dev/retrace/trace"
)

// RandomMode is which randomness a traced request records and gets back
// on replay (DESIGN.md 14, RETRACE_RANDOM).
type RandomMode uint8

const (
	// RandomMath (the zero value, the default): the global sources of
	// math/rand and math/rand/v2 draw, on a traced goroutine, from a seed
	// of the request's own.
	RandomMath RandomMode = iota
	// RandomOff leaves randomness alone.
	RandomOff
	// RandomAll is RandomMath, and crypto/rand draws made on a traced
	// goroutine outside Go's crypto packages are recorded and handed back
	// in order on replay.
	RandomAll
)

func (m RandomMode) String() string {
	switch m {
	case RandomMath:
		return "math"
	case RandomOff:
		return "off"
	case RandomAll:
		return "all"
	}
	return fmt.Sprintf("RandomMode(%d)", int(m))
}

// ParseRandom parses a RETRACE_RANDOM value; "" is RandomMath.
func ParseRandom(s string) (RandomMode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "math":
		return RandomMath, nil
	case "off":
		return RandomOff, nil
	case "all":
		return RandomAll, nil
	}
	return RandomMath, fmt.Errorf("retrace: random %q is not one of off, math, all", s)
}

// RandomRecorder is implemented by a Recorder that stores what a sampled
// request drew (RETRACE_RANDOM): RandomStarted is called once per sampled
// request, right after StartRequest returned its tid, with the request's
// randomness; the seed is set, and crypto draws (RandomAll) are added to
// it until the request ends. The Recorder reads it when it ends the
// session (trace.Random's methods are safe for concurrent use).
type RandomRecorder interface {
	RandomStarted(c *ConnInfo, tid string, r *trace.Random)
}

// currentRandom returns the randomness of the calling goroutine's request,
// or nil. While no trace with randomness is bound it costs one atomic
// load.
func currentRandom() *trace.Random {
	if trace.RandomBound() == 0 {
		return nil
	}
	if t := trace.Current(); t != nil {
		return t.Random
	}
	return nil
}

// randomTrace is a trace and its randomness, allocated together.
type randomTrace struct {
	t trace.Trace
	r trace.Random
}

// newTrace makes the trace of a request that gets one, with its
// randomness: a fresh seed in record mode, the recording's in replay (from
// the request's Retrace-Replay-Seed and Retrace-Replay-Random); none when
// randomness is left alone, or nothing of it is patched, or a replayed
// request carries neither header (its recording says nothing of its
// randomness: made with RETRACE_RANDOM=off or before it existed, or a load
// test's request): its draws are real, and no divergence is reported.
func (e *engine) newTrace(tid string, h *trace.RequestHead) *trace.Trace {
	if e.random == RandomOff || !e.mathPatched && !e.cryptoPatched || e.cfg.Mode == Replay && h.Random == nil {
		return &trace.Trace{ID: tid, ReplayTime: h.ReplayTime, Arrived: e.now()}
	}
	rt := &randomTrace{t: trace.Trace{ID: tid, ReplayTime: h.ReplayTime, Arrived: e.now()}}
	rt.t.Random = &rt.r
	crypto := e.cryptoPatched
	if e.cfg.Mode == Record {
		rt.r.InitRecord(runtimeRand(), crypto)
		return &rt.t
	}
	var seed *trace.ReplaySeed
	var draws [][]byte
	if rh := h.Random; rh != nil {
		if rh.Seed != "" {
			s, err := trace.ParseReplaySeed(rh.Seed)
			if err != nil {
				e.reportOnce("bad-replay-seed", "replayed request with a bad seed: its math draws get real randomness", "trace", tid, "err", err)
			} else {
				seed = &s
			}
		}
		if crypto && rh.BadRandom {
			e.reportOnce("bad-replay-random", "Retrace-Replay-Random longer than the agent keeps; the request's crypto draws get real randomness",
				"trace", tid, "max", trace.MaxReplayRandom)
		}
		if crypto && rh.Random != "" {
			var err error
			if draws, err = trace.ParseReplayRandom(rh.Random); err != nil {
				e.reportOnce("bad-replay-random", "replayed request with bad crypto draws: they get real randomness", "trace", tid, "err", err)
				draws = nil
			}
		}
	}
	rt.r.InitReplay(seed, draws, crypto)
	rt.r.TraceID, rt.r.OnDiverge = tid, reportDivergence
	return &rt.t
}

// reportDivergence is every replayed Random's OnDiverge.
func reportDivergence(tid string, d trace.Divergence) {
	if e := active.Load(); e != nil {
		e.diverged(tid, d)
	}
}

//go:linkname runtimeRand runtime.rand
func runtimeRand() uint64

// mathDraw is the next draw of source s for the calling goroutine's
// request, false when it gets real randomness: no request, or a draw the
// standard library makes for itself (database/sql handing a connection to
// a random waiter, crypto's key generation), which depends on timing, not
// on the request.
func mathDraw(s trace.MathSource) (uint64, bool) {
	if r := currentRandom(); r != nil {
		return tracedDraw(r, s)
	}
	return 0, false
}

// tracedDraw is mathDraw on a traced goroutine. A panic in it is
// recovered and counted, and the draw is real (fail open).
func tracedDraw(r *trace.Random, s trace.MathSource) (v uint64, ok bool) {
	defer func() {
		if p := recover(); p != nil {
			randomPanicked("math", p)
			v, ok = 0, false
		}
	}()
	if !appMathDraw() {
		return 0, false
	}
	return r.Uint64(s)
}

// randomPanicked counts and reports (once) a panic recovered in a random
// double.
func randomPanicked(where string, p any) {
	if e := active.Load(); e != nil {
		e.recovered("random-"+where, p)
		return
	}
	counters.failures.Add(1)
}

// cryptoDraw fills b for a traced goroutine's request r: from the
// recording in replay, else real (recorded in record mode); false when the
// draw is not the application's, or a panic was recovered, and b is to be
// filled with real randomness by the caller.
func cryptoDraw(r *trace.Random, b []byte, real func([]byte)) (done bool) {
	defer func() {
		if p := recover(); p != nil {
			randomPanicked("crypto", p)
			done = false
		}
	}()
	if !r.Crypto || !userDraw() {
		return false
	}
	if !r.Replay(b) {
		real(b)
		r.Record(b)
	}
	return true
}

const int63Mask = 1<<63 - 1

// randInt63 replaces math/rand.(*runtimeSource).Int63, the source of
// math/rand's top-level functions (every one of them draws through Int63
// or Uint64).
func randInt63(unsafe.Pointer) int64 {
	if v, ok := mathDraw(trace.MathRand); ok {
		return int64(v & int63Mask)
	}
	return int64(runtimeRand() & int63Mask)
}

// randUint64 replaces math/rand.(*runtimeSource).Uint64.
func randUint64(unsafe.Pointer) uint64 {
	if v, ok := mathDraw(trace.MathRand); ok {
		return v
	}
	return runtimeRand()
}

// randV2Uint64 replaces math/rand/v2.(*runtimeSource).Uint64, through
// which every top-level function of math/rand/v2 draws.
func randV2Uint64(unsafe.Pointer) uint64 {
	if v, ok := mathDraw(trace.MathRandV2); ok {
		return v
	}
	return runtimeRand()
}

// readerRead is crypto/internal/rand.reader.Read, the default reader's
// own method (the receiver, a struct holding one interface, is unused):
// real randomness, called, never patched.
type readerReadFunc = func(tab, data unsafe.Pointer, b []byte) (int, error)

var (
	readerRead    atomic.Pointer[readerReadFunc]
	defaultReader unsafe.Pointer // the itab word of crypto/rand.Reader as Go sets it
)

// realRead fills b the way crypto/rand.Read does.
func realRead(b []byte) {
	if *(*unsafe.Pointer)(unsafe.Pointer(&crand.Reader)) == defaultReader {
		(*readerRead.Load())(nil, nil, b)
		return
	}
	// the application replaced Reader: Read reads it, as crypto/rand does
	bb := make([]byte, len(b))
	if _, err := io.ReadFull(crand.Reader, bb); err != nil {
		panic("crypto/rand: failed to read random data: " + err.Error())
	}
	copy(b, bb)
}

// cryptoRead replaces crypto/rand.Read (and so crypto/rand.Text).
func cryptoRead(b []byte) (int, error) {
	if r := currentRandom(); r != nil && cryptoDraw(r, b, realRead) {
		return len(b), nil
	}
	realRead(b)
	return len(b), nil
}

// cryptoReaderRead replaces the Read method of crypto/rand.Reader (the
// (*reader).Read wrapper its interface calls): Int, Prime, io.ReadFull of
// Reader (google/uuid, gofrs/uuid), TLS handshakes.
func cryptoReaderRead(_ unsafe.Pointer, b []byte) (int, error) {
	rr := *readerRead.Load()
	if r := currentRandom(); r != nil && cryptoDraw(r, b, readerReal) {
		return len(b), nil
	}
	return rr(nil, nil, b)
}

// readerReal fills b from the default reader's own Read.
func readerReal(b []byte) { (*readerRead.Load())(nil, nil, b) }

// userDraw reports whether the draw in progress is the application's:
// the first function on the stack above the draw that is not the agent's,
// nor one of the standard library's through which applications draw (io,
// bufio, math/rand, math/rand/v2, crypto/rand), is not in the standard
// library. A TLS handshake draws from crypto/tls, a key generation from
// crypto/ecdsa, database/sql's pool from database/sql; an id generator
// from github.com/google/uuid (through io.ReadFull), a handler from its
// own package.
//
// The stack is walked by frame pointers, and each return address is
// classified once (its inlined frames included), then found in a table:
// only draws on a traced goroutine pay it.
func userDraw() bool { return drawFor(callerDep) }

// appMathDraw reports whether the math/rand draw in progress is the
// application's own: the first function above the draw that is not the
// agent's nor math/rand's is in the application's code — its main module,
// package main, or a module replaced by a local directory — and not in the
// standard library or a module it depends on. A dependency's math/rand
// draws are its own business, made when its state says so rather than
// when the request does: pgx's pool draws a lifetime jitter for each
// connection it opens, on the goroutine of the request that made it
// grow, and a retry's backoff jitter is drawn when the network says. They
// get real randomness and leave the request's sequence alone, so that
// the request's own draws replay whatever the pool did. A library that
// draws math/rand for its caller (a shuffle helper) is not replayed.
func appMathDraw() bool { return drawFor(callerStd) }

// drawFor walks the stack of the draw in progress to its first frame of
// a kind other than callerThrough: the draw is the application's when
// that is callerUser, or dep is callerDep and it is a dependency's.
func drawFor(dep uint8) bool {
	var pcs [16]uintptr
	n := returnPCs(pcs[:])
	for _, pc := range pcs[:n] {
		switch k := callerKind(pc); k {
		case callerUser:
			return true
		case callerStd:
			return false
		case callerDep:
			return dep == callerDep
		}
	}
	return true
}

// Kinds of return addresses, for userDraw.
const (
	callerUnknown uint8 = iota
	callerThrough       // the agent's, or a library function that draws for its caller
	callerStd           // the standard library's own
	callerUser          // the application's: its main module, package main, a module replaced by a local directory
	callerDep           // a module the application depends on
)

// kindEntry is a classified return address; entries are never modified,
// so a slot of kindCache is read with one atomic load.
type kindEntry struct {
	pc   uintptr
	kind uint8
}

// kindCache holds callerKind's answers, direct-mapped by a hash of the
// return address (a collision replaces the entry: it is classified again
// when needed).
var kindCache [4096]atomic.Pointer[kindEntry]

// callerKind classifies the return address pc: the innermost of the
// frames inlined there that is not callerThrough decides.
func callerKind(pc uintptr) uint8 {
	slot := &kindCache[uint64(pc)*0x9e3779b97f4a7c15>>52]
	if e := slot.Load(); e != nil && e.pc == pc {
		return e.kind
	}
	// A return address found by frame pointers is a physical frame: the
	// runtime expands it into the logical frames inlined there (innermost
	// first), as it does for profiles; each names its function.
	k := callerThrough
	var logical [32]uintptr
	n := fpunwindExpand(logical[:], []uintptr{0, pc}) // no frame skipped
	for _, lpc := range logical[:n] {
		f, _ := runtime.CallersFrames([]uintptr{lpc}).Next()
		if pk := packageKind(funcPackage(f.Function)); pk != callerThrough {
			k = pk
			break
		}
	}
	slot.Store(&kindEntry{pc: pc, kind: k})
	return k
}

// fpunwindExpand turns return addresses found by frame pointers into the
// logical frames of runtime.Callers; src[0] is a number of frames to skip.
// The runtime keeps it for runtime/pprof.
//
//go:linkname fpunwindExpand runtime.pprof_fpunwindExpand
func fpunwindExpand(dst, src []uintptr) int

// packageKind classifies a package by its import path.
func packageKind(pkg string) uint8 {
	switch pkg {
	case "", "io", "bufio", "math/rand", "math/rand/v2", "crypto/rand", "crypto/internal/rand",
		"github.com/retrace-dev/retrace/hook", "runtime":
		return callerThrough
	case "main":
		return callerUser
	}
	for _, m := range modulePaths() {
		if pkg == m.path || strings.HasPrefix(pkg, m.path+"/") {
			return m.kind
		}
	}
	first, _, _ := strings.Cut(pkg, "/")
	if strings.Contains(first, ".") {
		// a module the build information does not list (none is when the
		// binary was built without module information)
		return callerDep
	}
	return callerStd // including vendor/golang.org/x/crypto/..., std's own copy
}

// module is a module the program was built from and the kind of its
// code: callerUser for the application's (the main module, and a module
// replaced by a local directory, as a monorepo's or a workspace's),
// callerDep for a dependency.
type module struct {
	path string
	kind uint8
}

// modulePaths are the modules of the program, the longest path first (a
// module nested in another's path is its own).
var modulePaths = sync.OnceValue(func() []module {
	var out []module
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return out
	}
	for i, m := range append([]*debug.Module{&bi.Main}, bi.Deps...) {
		if m.Path == "" || m.Path == "command-line-arguments" {
			continue
		}
		k := callerDep
		if i == 0 || m.Replace != nil && m.Replace.Version == "" || m.Version == "(devel)" {
			k = callerUser
		}
		out = append(out, module{m.Path, k})
	}
	slices.SortStableFunc(out, func(a, b module) int { return len(b.path) - len(a.path) })
	return out
})

//go:linkname typelinks reflect.typelinks
func typelinks() (sections []unsafe.Pointer, offset [][]int32)

//go:linkname rtypeOff reflect.rtypeOff
func rtypeOff(section unsafe.Pointer, off int32) unsafe.Pointer

// typeOfDescriptor makes a reflect.Type of a type descriptor.
func typeOfDescriptor(p unsafe.Pointer) reflect.Type {
	t := reflect.TypeOf(0)
	(*[2]unsafe.Pointer)(unsafe.Pointer(&t))[1] = p
	return t
}

// pointerType finds the type *pkgName.name of the package at pkgPath among
// the types the linker lists for reflect (sorted by their string), or nil.
// The global sources of math/rand and math/rand/v2 are of unexported
// types that nothing exported reaches.
func pointerType(pkgName, name, pkgPath string) reflect.Type {
	want := "*" + pkgName + "." + name
	secs, offs := typelinks()
	for i, sec := range secs {
		o := offs[i]
		at := func(j int) reflect.Type { return typeOfDescriptor(rtypeOff(sec, o[j])) }
		for j := sort.Search(len(o), func(j int) bool { return at(j).String() >= want }); j < len(o); j++ {
			t := at(j)
			if t.String() != want {
				break
			}
			if t.Kind() == reflect.Pointer && t.Elem().PkgPath() == pkgPath && t.Elem().Name() == name {
				return t
			}
		}
	}
	return nil
}

// methodTarget is the method m (ok: found) of a type, named runtimeName,
// to be replaced by double. Callers look methods up by constant names: a
// MethodByName with a name the linker cannot see makes it keep every
// exported method of every type in the program (megabytes in a service).
func methodTarget(m reflect.Method, ok bool, runtimeName string, double any) (target, error) {
	if !ok {
		return target{}, fmt.Errorf("%w: %s not found", ErrUnsupported, runtimeName)
	}
	return target{name: runtimeName, word: codeWord(m.Func), typ: m.Func.Type(), double: double}, nil
}

// mathTargets are the sources of math/rand's and math/rand/v2's top-level
// functions.
func mathTargets() ([]target, error) {
	var out []target
	add := func(m reflect.Method, ok bool, runtimeName string, double any) error {
		t, err := methodTarget(m, ok, runtimeName, double)
		if err == nil {
			out = append(out, t)
		}
		return err
	}
	if v1 := pointerType("rand", "runtimeSource", "math/rand"); v1 != nil {
		m, ok := v1.MethodByName("Int63")
		if err := add(m, ok, "math/rand.(*runtimeSource).Int63", randInt63); err != nil {
			return nil, err
		}
		m, ok = v1.MethodByName("Uint64")
		if err := add(m, ok, "math/rand.(*runtimeSource).Uint64", randUint64); err != nil {
			return nil, err
		}
	}
	if v2 := pointerType("rand", "runtimeSource", "math/rand/v2"); v2 != nil {
		m, ok := v2.MethodByName("Uint64")
		if err := add(m, ok, "math/rand/v2.(*runtimeSource).Uint64", randV2Uint64); err != nil {
			return nil, err
		}
	}
	if len(out) == 0 {
		// neither package is linked (nothing in the program draws from
		// them), or the runtime lists their sources no more
		return nil, nil
	}
	return out, nil
}

// cryptoTargets are crypto/rand.Read and the Read of crypto/rand.Reader.
func cryptoTargets() ([]target, error) {
	rt := reflect.TypeOf(crand.Reader)
	if rt == nil || rt.Kind() != reflect.Struct || rt.NumField() != 1 || rt.Field(0).Type.Kind() != reflect.Interface ||
		rt.PkgPath() != "crypto/internal/rand" {
		return nil, fmt.Errorf("%w: crypto/rand.Reader is a %v, not the struct the agent knows (was it replaced?)", ErrUnsupported, rt)
	}
	own, ok := rt.MethodByName("Read")
	if !ok {
		return nil, fmt.Errorf("%w: crypto/rand.Reader has no Read", ErrUnsupported)
	}
	inner := target{name: "crypto/internal/rand.reader.Read", word: codeWord(own.Func)}
	if err := checkName(inner); err != nil {
		return nil, err
	}
	fn := funcOf[readerReadFunc](inner.word)
	readerRead.Store(&fn)
	defaultReader = *(*unsafe.Pointer)(unsafe.Pointer(&crand.Reader))

	wm, ok := reflect.PointerTo(rt).MethodByName("Read")
	wrapper, err := methodTarget(wm, ok, "crypto/internal/rand.(*reader).Read", cryptoReaderRead)
	if err != nil {
		return nil, err
	}
	if itabRead := *(*uintptr)(unsafe.Add(defaultReader, 3*unsafe.Sizeof(uintptr(0)))); itabRead != *(*uintptr)(wrapper.word) {
		return nil, fmt.Errorf("%w: crypto/rand.Reader's Read is %s, not %s", ErrUnsupported, funcForPC(itabRead), wrapper.name)
	}
	v := reflect.ValueOf(crand.Read)
	word := new(uintptr)
	*word = v.Pointer()
	read := target{name: "crypto/rand.Read", word: unsafe.Pointer(word), typ: v.Type(), double: cryptoRead}
	return []target{read, wrapper}, nil
}

// funcPackage returns the import path of a function's package, from its
// runtime name ("crypto/tls.(*Conn).makeClientHello" → "crypto/tls").
func funcPackage(name string) string {
	if i := strings.IndexByte(name, '['); i >= 0 {
		name = name[:i] // type arguments may hold paths
	}
	slash := strings.LastIndexByte(name, '/') + 1
	dot := strings.IndexByte(name[slash:], '.')
	if dot < 0 {
		return ""
	}
	return name[:slash+dot]
}
