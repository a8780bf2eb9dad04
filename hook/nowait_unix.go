//go:build unix

package hook

import (
	"net"
	"syscall"
	"unsafe"
)

// writeNoWait writes what one system call takes of b, without waiting for
// room in the socket's buffer or reporting anything.
func (l *netLayout) writeNoWait(fd unsafe.Pointer, b []byte) {
	p := fd
	rc, err := (*net.TCPConn)(unsafe.Pointer(&p)).SyscallConn() // see fdSysfd
	if err != nil {
		return
	}
	_ = rc.Write(func(s uintptr) bool {
		_, _ = syscall.Write(int(s), b)
		return true
	})
}
