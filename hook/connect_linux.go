package hook

import (
	"net"
	"net/netip"
	"reflect"
	"strconv"
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
		to, rt := e.redirect(fd, sa, &err)
		if rt != routeDirect {
			if err != nil {
				return err
			}
			err = rawConnect(fd, to)
			if rt == routeMock && err != nil && err != syscall.EINPROGRESS && err != syscall.EINTR {
				e.mockUnreachable(err)
			}
			return err
		}
	}
	return rawConnect(fd, sa)
}

// redirect decides where a connect goes: routeDirect (as dialled), or to
// to, the mock server or a rewrite target (with *err set when that cannot
// be reached from this socket's family).
func (e *engine) redirect(fd int, sa syscall.Sockaddr, errp *error) (to syscall.Sockaddr, rt route) {
	defer func() {
		if r := recover(); r != nil {
			e.recovered("connect", r)
			to, rt = nil, routeDirect
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
		return nil, routeDirect
	}
	dst := ""
	rt = routeMock
	var rule *rewriteRule
	if isPlaceholder(ap.Addr()) {
		// a name dialled through the mock, unresolved (resolve.go)
		if name, ok := e.names.nameOf(ap.Addr()); ok {
			dst = net.JoinHostPort(name, strconv.Itoa(int(ap.Port())))
		}
	}
	if dst == "" {
		rt, rule = e.cfg.routeAddr(ap)
	}
	switch rt {
	case routeDirect:
		e.connects.set(fd, "")
		return nil, routeDirect
	case routeRewrite:
		e.connects.set(fd, "")
		tgt := rule.target(ap.Port())
		if to = sockaddrFor(tgt, v6); to == nil {
			e.reportOnce("rewrite-family:"+tgt.String(), "cannot rewrite an IPv4 socket's connection to an IPv6 address; connection refused",
				"dst", ap.String(), "to", tgt.String())
			counters.failures.Add(1)
			*errp = syscall.EAFNOSUPPORT
			return nil, routeRewrite
		}
		counters.rewritten.Add(1)
		e.debugOnce("rewrite:"+ap.String(), "rewriting connections", "dst", ap.String(), "to", tgt.String())
		return to, routeRewrite
	}
	mock := e.cfg.mock
	if to = sockaddrFor(mock, v6); to == nil {
		e.reportOnce("connect-family", "cannot redirect an IPv4 socket to an IPv6 mock address; connection refused",
			"dst", ap.String(), "mock", mock.String())
		counters.failures.Add(1)
		*errp = syscall.EAFNOSUPPORT
		e.connects.set(fd, "")
		return nil, routeMock
	}
	if dst == "" {
		dst = ap.String()
	}
	e.connects.set(fd, dst)
	counters.redirected.Add(1)
	e.debugOnce("redirect:"+dst, "redirecting connections to the mock server", "dst", dst, "mock", mock.String())
	return to, routeMock
}

// sockaddrFor returns the socket address of ap for a socket of the family
// of v6 (an AF_INET6 socket reaches an IPv4 address through its v4-mapped
// form); nil when an IPv4 socket cannot reach ap.
func sockaddrFor(ap netip.AddrPort, v6 bool) syscall.Sockaddr {
	switch {
	case !v6 && ap.Addr().Is4():
		return &syscall.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	case v6:
		return &syscall.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
	}
	return nil
}

// mockUnreachable reports, once per Install at the default log level, that
// a connection redirected to the mock server failed to connect: the
// application's own error names the destination it dialled, not the mock.
func (e *engine) mockUnreachable(err error) {
	e.reportOnce("mock-unreachable", "cannot reach the mock server; connections redirected to it fail",
		"mock", e.cfg.mock.String(), "err", err.Error())
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

// getsockoptTarget is syscall.GetsockoptInt, through which net reads the
// outcome of a connect that did not complete at once (SO_ERROR).
func getsockoptTarget() (target, error) {
	v := reflect.ValueOf(syscall.GetsockoptInt)
	word := new(uintptr)
	*word = v.Pointer()
	return target{name: "syscall.GetsockoptInt", word: unsafe.Pointer(word), typ: v.Type(), double: getsockoptIntDouble}, nil
}

// getsockoptIntDouble replaces syscall.GetsockoptInt: it reads the option
// itself, and a connect to the mock server that failed (a remote mock, or
// one not started yet) is reported as by connectDouble.
func getsockoptIntDouble(fd, level, opt int) (int, error) {
	var n int32
	l := uint32(4)
	_, _, errno := syscall.Syscall6(syscall.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt),
		uintptr(unsafe.Pointer(&n)), uintptr(unsafe.Pointer(&l)), 0)
	if errno != 0 {
		return int(n), errno
	}
	if n != 0 && level == syscall.SOL_SOCKET && opt == syscall.SO_ERROR {
		if e := active.Load(); e != nil && e.cfg.Mode == Replay && e.connects.has(fd) {
			if en := syscall.Errno(n); en != syscall.EINPROGRESS && en != syscall.EALREADY && en != syscall.EINTR {
				e.mockUnreachable(en)
			}
		}
	}
	return int(n), nil
}
