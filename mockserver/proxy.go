package mockserver

import (
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/retrace-dev/retrace/wire"
)

// passthrough proxies the whole connection to the real destination: frame
// payloads go up unframed, whatever comes back goes down as it is.
func (c *conn) passthrough(real string) error {
	up, err := net.DialTimeout("tcp", real, 5*time.Second)
	if err != nil {
		return fmt.Errorf("pass-through destination %s: %w", real, err)
	}
	c.s.log.Debug("pass-through", "dst", c.dst, "real", real)
	done := make(chan struct{})
	go func() {
		defer close(done)
		io.Copy(c.nc, up)
		c.nc.Close() // the real server left: end the read loop below
	}()
	defer func() {
		up.Close()
		<-done
	}()
	for {
		if len(c.buf) > 0 {
			up.SetWriteDeadline(time.Now().Add(c.s.cfg.WriteTimeout))
			if _, err := up.Write(c.buf); err != nil {
				return err
			}
			c.buf = c.buf[:0]
		}
		if _, err := c.readFrame(); err != nil {
			return err
		}
	}
}

// proxy sends one untraced request to the real destination and returns its
// answer, read up to the end of one protocol response.
func (c *conn) proxy(real string, r *wire.Request) ([]byte, error) {
	if c.up != nil && c.upAddr != real {
		c.up.Close()
		c.up = nil
	}
	if c.up == nil {
		up, err := net.DialTimeout("tcp", real, 5*time.Second)
		if err != nil {
			return nil, err
		}
		c.up, c.upAddr = up, real
	}
	deadline := time.Now().Add(c.s.cfg.ReadTimeout)
	c.up.SetDeadline(deadline)
	if _, err := c.up.Write(r.Raw); err != nil {
		c.up.Close()
		c.up = nil
		return nil, err
	}
	var resp []byte
	buf := make([]byte, 32<<10)
	for {
		n, err := c.up.Read(buf)
		resp = append(resp, buf[:n]...)
		if end, perr := c.ad.AnswerLen(r, resp); perr != nil {
			c.up.Close()
			c.up = nil
			return nil, perr
		} else if end > 0 {
			return resp[:end], nil
		}
		if err != nil {
			c.up.Close()
			c.up = nil
			if errors.Is(err, io.EOF) && len(resp) > 0 {
				return resp, nil // a response that runs to the end of the connection
			}
			return nil, err
		}
		if len(resp) > c.s.cfg.MaxMessage {
			return nil, fmt.Errorf("%w: response from %s", wire.ErrTooLong, real)
		}
	}
}
