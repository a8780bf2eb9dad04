package hook

import (
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"slices"
	"sync"
	"syscall"
	"unsafe"
)

// netConn mirrors net.conn, the type embedded in *net.TCPConn (and the
// other net conns) whose Read, Write and Close are patched: one field, a
// *net.netFD.
type netConn struct {
	fd unsafe.Pointer
}

// netLayout is what the hooks know about net's unexported types, found
// through reflect once and checked, so a Go release that changes them makes
// Install fail instead of reading garbage.
type netLayout struct {
	connType reflect.Type // *net.conn
	read     target       // net.(*conn).Read etc., without their doubles
	write    target
	close    target

	// Offsets into net.netFD.
	sysfd, sotype, isConnected, network, laddr, raddr uintptr
	// tag is the offset of four bytes of net.netFD that no field covers
	// (alignment padding), where the hooks keep the index of the
	// connection's entry in their dense table (see connTable); 0 when the
	// struct has no such gap.
	tag uintptr

	// The netFD methods that do the work of the conn methods. They are
	// never patched.
	fdRead  func(fd unsafe.Pointer, b []byte) (int, error)
	fdWrite func(fd unsafe.Pointer, b []byte) (int, error)
	fdClose func(fd unsafe.Pointer) error
}

var layout = sync.OnceValues(findNetLayout)

func findNetLayout() (*netLayout, error) {
	l := &netLayout{}
	tcp := reflect.TypeFor[net.TCPConn]()
	if tcp.NumField() != 1 || tcp.Field(0).Name != "conn" || !tcp.Field(0).Anonymous {
		return nil, fmt.Errorf("%w: net.TCPConn is not struct{ conn }", ErrUnsupported)
	}
	conn := tcp.Field(0).Type
	if conn.Kind() != reflect.Struct || conn.NumField() != 1 || conn.Field(0).Name != "fd" ||
		conn.Field(0).Type.Kind() != reflect.Pointer {
		return nil, fmt.Errorf("%w: net.conn is not struct{ fd *netFD }", ErrUnsupported)
	}
	l.connType = reflect.PointerTo(conn)
	fdPtr := conn.Field(0).Type
	fd := fdPtr.Elem()
	field := func(name string, kind reflect.Kind) (uintptr, error) {
		f, ok := fd.FieldByName(name)
		if !ok || f.Type.Kind() != kind {
			return 0, fmt.Errorf("%w: net.netFD has no %s field of kind %v", ErrUnsupported, name, kind)
		}
		return f.Offset, nil
	}
	pfd, err := field("pfd", reflect.Struct)
	if err != nil {
		return nil, err
	}
	pf, _ := fd.FieldByName("pfd")
	sys, ok := pf.Type.FieldByName("Sysfd")
	if !ok || sys.Type.Kind() != reflect.Int {
		return nil, fmt.Errorf("%w: poll.FD has no Sysfd int", ErrUnsupported)
	}
	l.sysfd = pfd + sys.Offset
	var errs []error
	for _, f := range []struct {
		off  *uintptr
		name string
		kind reflect.Kind
	}{
		{&l.sotype, "sotype", reflect.Int},
		{&l.isConnected, "isConnected", reflect.Bool},
		{&l.network, "net", reflect.String},
		{&l.laddr, "laddr", reflect.Interface},
		{&l.raddr, "raddr", reflect.Interface},
	} {
		var err error
		*f.off, err = field(f.name, f.kind)
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	// poll.FD's first line is written by every Read and Write (its
	// fdMutex), on whichever core runs them: an index read there first
	// would make the hook's load and net's atomic update two transfers of
	// the line between cores instead of one. The fields after it are
	// written only while the connection is set up, so a core keeps its
	// copy of their line.
	if l.tag = padding(fd, pfd+pf.Type.Size()); l.tag == 0 {
		l.tag = padding(fd, 0)
	}
	method := func(t reflect.Type, name, runtimeName string) (target, error) {
		// MethodByName is called with constant names only: a call with a
		// name the linker cannot see makes it keep every exported method
		// of every type in the program (megabytes in a service binary).
		var m reflect.Method
		var ok bool
		switch name {
		case "Read":
			m, ok = t.MethodByName("Read")
		case "Write":
			m, ok = t.MethodByName("Write")
		case "Close":
			m, ok = t.MethodByName("Close")
		}
		if !ok {
			return target{}, fmt.Errorf("%w: %v has no method %s", ErrUnsupported, t, name)
		}
		return target{name: runtimeName, word: codeWord(m.Func), typ: m.Func.Type()}, nil
	}
	targets := []struct {
		t    *target
		typ  reflect.Type
		name string
		rt   string
	}{
		{&l.read, l.connType, "Read", "net.(*conn).Read"},
		{&l.write, l.connType, "Write", "net.(*conn).Write"},
		{&l.close, l.connType, "Close", "net.(*conn).Close"},
	}
	for _, x := range targets {
		if *x.t, err = method(x.typ, x.name, x.rt); err != nil {
			return nil, err
		}
	}
	var fr, fw, fc target
	for _, x := range []struct {
		t    *target
		name string
		rt   string
	}{{&fr, "Read", "net.(*netFD).Read"}, {&fw, "Write", "net.(*netFD).Write"}, {&fc, "Close", "net.(*netFD).Close"}} {
		if *x.t, err = method(fdPtr, x.name, x.rt); err != nil {
			return nil, err
		}
		if err := checkName(*x.t); err != nil {
			return nil, err
		}
	}
	// The netFD methods are called through these func values; their
	// signatures (receiver first) must be what we call them with.
	if err := sameABI(fr.typ, reflect.TypeFor[func(unsafe.Pointer, []byte) (int, error)]()); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnsupported, err)
	}
	if err := sameABI(fw.typ, reflect.TypeFor[func(unsafe.Pointer, []byte) (int, error)]()); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnsupported, err)
	}
	if err := sameABI(fc.typ, reflect.TypeFor[func(unsafe.Pointer) error]()); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnsupported, err)
	}
	l.fdRead = funcOf[func(unsafe.Pointer, []byte) (int, error)](fr.word)
	l.fdWrite = funcOf[func(unsafe.Pointer, []byte) (int, error)](fw.word)
	l.fdClose = funcOf[func(unsafe.Pointer) error](fc.word)
	return l, nil
}

// padding returns the offset of the first four bytes of struct type t at
// or after from, aligned for a uint32, that none of its fields covers (at
// any depth), or 0 when there are none. In a net.netFD the allocator zeroes
// them with the rest of a new value, and net never writes them: it stores
// fields one by one and never copies a netFD whole (netFDs are used by
// pointer only, and hold a mutex).
func padding(t reflect.Type, from uintptr) uintptr {
	covered := make([]bool, t.Size())
	var cover func(t reflect.Type, base uintptr)
	cover = func(t reflect.Type, base uintptr) {
		switch t.Kind() {
		case reflect.Struct:
			for i := 0; i < t.NumField(); i++ {
				f := t.Field(i)
				cover(f.Type, base+f.Offset)
			}
		case reflect.Array:
			for i := 0; i < t.Len(); i++ {
				cover(t.Elem(), base+uintptr(i)*t.Elem().Size())
			}
		default:
			for i := range t.Size() {
				covered[base+i] = true
			}
		}
	}
	cover(t, 0)
	for off := max(4, (from+3)&^3); off+4 <= t.Size(); off += 4 {
		if !slices.Contains(covered[off:off+4], true) {
			return off
		}
	}
	return 0
}

// checkName verifies that t's code pointer leads to the function named.
func checkName(t target) error {
	pc := *(*uintptr)(t.word)
	if f := funcForPC(pc); f != t.name {
		return fmt.Errorf("%w: %s: code pointer leads to %q", ErrUnsupported, t.name, f)
	}
	return nil
}

// fdSysfd returns the file descriptor of fd (a *net.netFD), or false when
// it is closed. It reads it through net's own RawConn.Control, which holds
// a reference on the descriptor: a Close on another goroutine may be
// clearing it at the same moment.
func (l *netLayout) fdSysfd(fd unsafe.Pointer) (int, bool) {
	p := fd
	// a *net.TCPConn is a pointer to struct{ conn{ fd *netFD } } (checked
	// in findNetLayout), so &p is one, whatever the socket's kind
	rc, err := (*net.TCPConn)(unsafe.Pointer(&p)).SyscallConn()
	if err != nil {
		return -1, false
	}
	sysfd := -1
	if err := rc.Control(func(s uintptr) { sysfd = int(s) }); err != nil {
		return -1, false
	}
	return sysfd, true
}

// Accessors of netFD fields set when it is made; fd is a *net.netFD.
func (l *netLayout) fdStream(fd unsafe.Pointer) bool {
	return *(*int)(unsafe.Add(fd, l.sotype)) == syscall.SOCK_STREAM
}
func (l *netLayout) fdConnected(fd unsafe.Pointer) bool {
	return *(*bool)(unsafe.Add(fd, l.isConnected))
}
func (l *netLayout) fdNet(fd unsafe.Pointer) string { return *(*string)(unsafe.Add(fd, l.network)) }
func (l *netLayout) fdLaddr(fd unsafe.Pointer) net.Addr {
	return *(*net.Addr)(unsafe.Add(fd, l.laddr))
}
func (l *netLayout) fdRaddr(fd unsafe.Pointer) net.Addr {
	return *(*net.Addr)(unsafe.Add(fd, l.raddr))
}

// setFdRaddr sets the address the netFD's RemoteAddr reports.
func (l *netLayout) setFdRaddr(fd unsafe.Pointer, a net.Addr) {
	*(*net.Addr)(unsafe.Add(fd, l.raddr)) = a
}

// opError wraps err the way net.(*conn) methods do. Not inlined: it would
// make the frames of the hot paths that call it larger (see connRead).
//
//go:noinline
func (l *netLayout) opError(op string, fd unsafe.Pointer, err error) error {
	return &net.OpError{Op: op, Net: l.fdNet(fd), Source: l.fdLaddr(fd), Addr: l.fdRaddr(fd), Err: err}
}

// The unhooked behaviour of net.(*conn) Read, Write and Close.

func (l *netLayout) plainRead(c *netConn, b []byte) (int, error) {
	n, err := l.fdRead(c.fd, b)
	if err != nil {
		err = l.readError(c.fd, err)
	}
	return n, err
}

// readError is the error net.(*conn).Read returns for the netFD's err.
//
//go:noinline
func (l *netLayout) readError(fd unsafe.Pointer, err error) error {
	if err == io.EOF {
		return err
	}
	return l.opError("read", fd, err)
}

func (l *netLayout) plainWrite(c *netConn, b []byte) (int, error) {
	n, err := l.fdWrite(c.fd, b)
	if err != nil {
		err = l.opError("write", c.fd, err)
	}
	return n, err
}

func (l *netLayout) plainClose(c *netConn) error {
	err := l.fdClose(c.fd)
	if err != nil {
		err = l.opError("close", c.fd, err)
	}
	return err
}
