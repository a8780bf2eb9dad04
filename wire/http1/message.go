// Whole messages decoded for comparison: an HTTP/1.x request or response
// with its transfer coding (chunked) and content coding (gzip, deflate)
// removed, read with net/http.

package http1

import (
	"bufio"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// MaxBody bounds a decoded body; a longer one is cut and marked Truncated.
const MaxBody = 64 << 20

// ParsedResponse is an HTTP response with its transfer coding (chunked)
// and content coding (gzip, deflate) removed.
type ParsedResponse struct {
	Status    int
	Header    http.Header
	Body      []byte
	Truncated bool // the body is a prefix of the real one
	// Close reports that the connection it came on must not be reused.
	Close bool
}

// ParsedRequest is an HTTP request with its transfer and content codings
// removed.
type ParsedRequest struct {
	Method    string
	Target    string // request target as sent: path and query
	Header    http.Header
	Body      []byte
	Truncated bool
}

// ReadResponse reads one response from br, skipping interim (1xx)
// responses, and decodes its body. method is the method of the request it
// answers (a HEAD response has no body).
func ReadResponse(br *bufio.Reader, method string) (*ParsedResponse, error) {
	req := &http.Request{Method: method}
	for {
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
			resp.Body.Close()
			continue
		}
		out := &ParsedResponse{Status: resp.StatusCode, Header: resp.Header, Close: resp.Close}
		body, trunc, err := readBody(resp.Body)
		resp.Body.Close()
		out.Body, out.Truncated = body, trunc
		if err != nil {
			return out, err
		}
		out.Body, out.Truncated = decodeContent(resp.Header, body, out.Truncated)
		return out, nil
	}
}

// ParseResponse decodes a recorded response. A body cut short (a recording
// truncated at the recorder's cap) is returned as far as it goes with
// Truncated set, not as an error.
func ParseResponse(raw []byte, method string) (*ParsedResponse, error) {
	resp, err := ReadResponse(bufio.NewReader(bytes.NewReader(raw)), method)
	if err != nil {
		if resp != nil && errors.Is(err, io.ErrUnexpectedEOF) {
			resp.Truncated = true
			resp.Body, _ = decodeContent(resp.Header, resp.Body, true)
			return resp, nil
		}
		return nil, fmt.Errorf("parse HTTP response: %w", err)
	}
	return resp, nil
}

// ParseRequest decodes a raw HTTP/1.x request.
func ParseRequest(raw []byte) (*ParsedRequest, error) {
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
	if err != nil {
		return nil, fmt.Errorf("parse HTTP request: %w", err)
	}
	out := &ParsedRequest{Method: req.Method, Target: req.RequestURI, Header: req.Header}
	if req.Host != "" {
		out.Header = out.Header.Clone()
		out.Header.Set("Host", req.Host)
	}
	body, trunc, err := readBody(req.Body)
	out.Truncated = trunc || errors.Is(err, io.ErrUnexpectedEOF)
	if err != nil && !out.Truncated {
		return nil, fmt.Errorf("parse HTTP request body: %w", err)
	}
	out.Body, out.Truncated = decodeContent(req.Header, body, out.Truncated)
	return out, nil
}

// readBody reads at most MaxBody bytes of r. The bytes read so far are
// returned also with an error.
func readBody(r io.Reader) ([]byte, bool, error) { return readLimited(r, MaxBody) }

func readLimited(r io.Reader, limit int) ([]byte, bool, error) {
	body, err := io.ReadAll(io.LimitReader(r, int64(limit)+1))
	if len(body) > limit {
		return body[:limit], true, nil
	}
	return body, false, err
}

// decodeContent removes the content codings named in h. A body that does
// not decode is kept as is: the difference will show in the comparison.
func decodeContent(h http.Header, body []byte, trunc bool) ([]byte, bool) {
	return uncompress(h.Get("Content-Encoding"), body, trunc, MaxBody)
}

// uncompress removes content coding ce (gzip, deflate) from body, keeping
// at most limit bytes (cut is then true). A body that does not decode is
// returned as it is.
func uncompress(ce string, body []byte, trunc bool, limit int) ([]byte, bool) {
	ce = strings.ToLower(strings.TrimSpace(ce))
	if ce == "" || ce == "identity" || len(body) == 0 {
		return body, trunc
	}
	var r io.Reader
	switch ce {
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return body, trunc
		}
		r = zr
	case "deflate":
		// RFC 9110 deflate is zlib; some servers send raw deflate.
		if zr, err := zlib.NewReader(bytes.NewReader(body)); err == nil {
			r = zr
		} else {
			r = flate.NewReader(bytes.NewReader(body))
		}
	default:
		return body, trunc
	}
	out, cut, err := readLimited(r, limit)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return body, trunc
	}
	return out, trunc || cut || err != nil
}
