package recording

import "testing"

func TestAPIName(t *testing.T) {
	cases := []struct{ method, path, want string }{
		{"GET", "/orders?id=3", "GET /orders"},
		{"POST", "/orders/1234/items", "POST /orders/{id}/items"},
		{"GET", "/u/3f2b1c9e-1a2b-4c3d-9e8f-0123456789ab", "GET /u/{id}"},
		{"GET", "/users/deadbeef", "GET /users/deadbeef"},
		{"GET", "/stock/MN-270", "GET /stock/{id}"},
		{"GET", "/u/ord-12345/x", "GET /u/{id}/x"},
		{"GET", "/v1/orders", "GET /v1/orders"},
		{"DELETE", "/", "DELETE /"},
		{"", "", "GET /"},
	}
	for _, c := range cases {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			if got := APIName(c.method, c.path); got != c.want {
				t.Errorf("APIName(%q, %q) = %q, want %q", c.method, c.path, got, c.want)
			}
		})
	}
}

func TestSessionAPI(t *testing.T) {
	for req, want := range map[string]string{
		"GET /orders/17 HTTP/1.1\r\nHost: x\r\n\r\n":  "GET /orders/{id}",
		"POST http://h:1/orders?x=1 HTTP/1.1\r\n\r\n": "POST /orders",
		"GET http://h:1 HTTP/1.1\r\n\r\n":             "GET /",
		"garbage":                                     "",
	} {
		s := &Session{Inbound: Inbound{Request: []byte(req)}}
		if got := s.API(); got != want {
			t.Errorf("API of %q = %q, want %q", req, got, want)
		}
	}
}

func BenchmarkNormalizePathUnchanged(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = NormalizePath("/v1/orders/search")
	}
}
