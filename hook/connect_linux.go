package hook

import (
	"net/netip"
	"reflect"
	"syscall"
	"unsafe"
)

// connectTarget is syscall.Connect, through which net connects every
// socket it dials (net.connectFunc).
func connectTarget() (target, error) {
	v := reflect.ValueOf(syscall.Connect)
	word := new(uintptr)
	*word = v.Pointer()
	return target{name: "syscall.Connect", word: unsafe.Pointer(word), typ: v.Type(), double: connectDouble}, nil
}

// connectDouble replaces syscall.Connect. In replay mode an IPv4/IPv6
// connect to anything but a pass-through destination or the mock server
// goes to the mock server, and the original destination is remembered for
// the connection's preamble and frames.
func connectDouble(fd int, sa syscall.Sockaddr) error {
	if e := active.Load(); e != nil && e.cfg.Mode == Replay {
		var err error
		if to, ok := e.redirect(fd, sa, &err); ok {
			if err != nil {
				return err
			}
			sa = to
		}
	}
	return rawConnect(fd, sa)
}

// redirect decides where a connect goes. ok reports a redirect (with *err
// set when the mock cannot be reached from this socket's family).
func (e *engine) redirect(fd int, sa syscall.Sockaddr, errp *error) (to syscall.Sockaddr, ok bool) {
	defer func() {
		if r := recover(); r != nil {
			e.recovered("connect", r)
			to, ok = nil, false
		}
	}()
	var ap netip.AddrPort
	v6 := false
	switch a := sa.(type) {
	case *syscall.SockaddrInet4:
		ap = netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port))
	case *syscall.SockaddrInet6:
		ap = netip.AddrPortFrom(netip.AddrFrom16(a.Addr).Unmap(), uint16(a.Port))
		v6 = true
	default:
		e.connects.set(fd, "")
		return nil, false
	}
	if ap == e.cfg.mock || e.cfg.passthrough[ap] {
		e.connects.set(fd, "")
		return nil, false
	}
	mock := e.cfg.mock
	switch {
	case !v6 && mock.Addr().Is4():
		to = &syscall.SockaddrInet4{Port: int(mock.Port()), Addr: mock.Addr().As4()}
	case v6:
		// An AF_INET6 socket reaches an IPv4 mock through its v4-mapped
		// address.
		to = &syscall.SockaddrInet6{Port: int(mock.Port()), Addr: mock.Addr().As16()}
	default:
		e.reportOnce("connect-family", "cannot redirect an IPv4 socket to an IPv6 mock address; connection refused",
			"dst", ap.String(), "mock", mock.String())
		counters.failures.Add(1)
		*errp = syscall.EAFNOSUPPORT
		e.connects.set(fd, "")
		return nil, true
	}
	dst := ap.String()
	e.connects.set(fd, dst)
	counters.redirected.Add(1)
	e.debugOnce("redirect:"+dst, "redirecting connections to the mock server", "dst", dst, "mock", mock.String())
	return to, true
}

// rawConnect is syscall.Connect for the address families net uses.
func rawConnect(fd int, sa syscall.Sockaddr) error {
	var (
		ptr unsafe.Pointer
		n   uintptr
		r4  syscall.RawSockaddrInet4
		r6  syscall.RawSockaddrInet6
		ru  syscall.RawSockaddrUnix
	)
	switch a := sa.(type) {
	case *syscall.SockaddrInet4:
		if a.Port < 0 || a.Port > 0xFFFF {
			return syscall.EINVAL
		}
		r4.Family = syscall.AF_INET
		setPort(&r4.Port, a.Port)
		r4.Addr = a.Addr
		ptr, n = unsafe.Pointer(&r4), unsafe.Sizeof(r4)
	case *syscall.SockaddrInet6:
		if a.Port < 0 || a.Port > 0xFFFF {
			return syscall.EINVAL
		}
		r6.Family = syscall.AF_INET6
		setPort(&r6.Port, a.Port)
		r6.Scope_id = a.ZoneId
		r6.Addr = a.Addr
		ptr, n = unsafe.Pointer(&r6), unsafe.Sizeof(r6)
	case *syscall.SockaddrUnix:
		name := a.Name
		if len(name) >= len(ru.Path) {
			return syscall.EINVAL
		}
		ru.Family = syscall.AF_UNIX
		for i := 0; i < len(name); i++ {
			ru.Path[i] = int8(name[i])
		}
		// Family, the name and its NUL; an abstract name ('@' or a
		// leading NUL) starts with NUL and is not NUL-terminated.
		n = 2
		if len(name) > 0 {
			n += uintptr(len(name)) + 1
		}
		if ru.Path[0] == '@' || (ru.Path[0] == 0 && n > 3) {
			ru.Path[0] = 0
			n--
		}
		ptr = unsafe.Pointer(&ru)
	case nil:
		return syscall.EINVAL
	default:
		// net only connects the families above; anything else was never
		// going to be redirected and cannot be encoded from outside syscall.
		return syscall.EAFNOSUPPORT
	}
	_, _, errno := syscall.Syscall(syscall.SYS_CONNECT, uintptr(fd), uintptr(ptr), n)
	if errno != 0 {
		return errno
	}
	return nil
}

// setPort stores a port in network byte order.
func setPort(dst *uint16, port int) {
	p := (*[2]byte)(unsafe.Pointer(dst))
	p[0], p[1] = byte(port>>8), byte(port)
}
