package agenttest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
)

// RawClient is an HTTP/1.1 keep-alive client for tests of a service that
// runs in the same process as the agent. It writes requests through raw
// system calls (SyscallConn), so the agent's Write hook neither strips the
// Retrace-* headers it sends on purpose nor frames them; responses are read
// through the ordinary, hooked, Read.
type RawClient struct {
	c  *net.TCPConn
	br *bufio.Reader
}

// DialRaw connects to addr ("host:port").
func DialRaw(addr string) (*RawClient, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("dial %s: not a TCP connection", addr)
	}
	return &RawClient{c: tc, br: bufio.NewReader(tc)}, nil
}

// Get sends GET path with the extra header lines (each "Name: value") and
// returns the response status and body.
func (rc *RawClient) Get(path string, headers ...string) (int, []byte, error) {
	req := "GET " + path + " HTTP/1.1\r\nHost: sut\r\n"
	for _, h := range headers {
		req += h + "\r\n"
	}
	req += "\r\n"
	if err := rc.WriteRaw([]byte(req)); err != nil {
		return 0, nil, err
	}
	return rc.ReadResponse()
}

// WriteRaw writes b with write(2), bypassing net.Conn.Write.
func (rc *RawClient) WriteRaw(b []byte) error {
	raw, err := rc.c.SyscallConn()
	if err != nil {
		return err
	}
	var werr error
	err = raw.Write(func(fd uintptr) bool {
		for len(b) > 0 {
			n, err := syscall.Write(int(fd), b)
			if errors.Is(err, syscall.EAGAIN) {
				return false
			}
			if err != nil {
				werr = err
				return true
			}
			b = b[n:]
		}
		return true
	})
	if err != nil {
		return err
	}
	return werr
}

// ReadResponse reads one response.
func (rc *RawClient) ReadResponse() (int, []byte, error) { return rc.ReadResponseTo("GET") }

// ReadResponseTo reads the response to a request of the method ("HEAD":
// a response without a body).
func (rc *RawClient) ReadResponseTo(method string) (int, []byte, error) {
	resp, err := http.ReadResponse(rc.br, &http.Request{Method: method})
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

// Close closes the connection.
func (rc *RawClient) Close() error { return rc.c.Close() }
