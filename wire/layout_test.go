package wire_test

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/retrace-dev/retrace"

// importers are the packages outside wire/ allowed to import a protocol
// package (wire/http1, wire/redis, …) directly, and why. Every other
// package meets protocols through wire and wire/protocols only, so a
// protocol's knowledge stays in its package.
var importers = map[string]string{
	"hook":                "the agent frames HTTP/1 responses on accepted connections (http1.Response) on its hot path",
	"recording/capture":   "an inbound request's session ends with its HTTP/1 response (http1.Response), on the agent's hot path; an HTTP/2 connection's streams are reassembled by wire/http2.Conn into one call or session each",
	"replayer/diff":       "compares the service's inbound HTTP/1 responses (http1.ParsedResponse: status, headers, decoded body); downstream calls go through wire.Comparer and Decode",
	"replayer/regress":    "pairs MySQL commands of a recording and a replay; reads the service's HTTP responses (http1.ReadResponse); sends HTTP/2 and gRPC sessions from their recorded form and decodes them with a schema (wire/http2, wire/protobuf)",
	"replayer/report":     "shows HTTP requests and responses as decoded messages with their fields",
	"replayer/extract":    "turns recorded gRPC sessions into timed requests (wire/http2.ParseMessage of the recorded request half)",
	"replayer/schema":     "descriptors from a descriptor set or a server's reflection, as a wire/protobuf Schema",
	"replayer/replaytest": "test helper: reassembles a real HTTP/2 server's tapped connections into sessions (wire/http2.Conn)",
	"recording":           "masks the recorded form of HTTP/2 halves and their gRPC messages (recording/mask_h2.go, until masking goes through each protocol's wire package)",
	"internal/agenttest":  "test servers of the agent's tests answer RESP with wire/redis",
	"mockserver/mocktest": "tests' stand-in for recording an HTTP/2 downstream reassembles its streams with wire/http2.Conn",
}

// TestProtocolsStayInWire fails when a package outside wire/ imports a
// protocol package without being one of the importers above, or when a
// protocol is parsed in a package of the old layout.
func TestProtocolsStayInWire(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	protocolPkg := func(p string) bool {
		rest, ok := strings.CutPrefix(p, module+"/wire/")
		return ok && rest != "protocols" && !strings.HasPrefix(rest, "wiretest")
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg := strings.TrimPrefix(f[0], module+"/")
		for _, old := range []string{"mockserver/mysql", "mockserver/redis", "mockserver/httpproto", "internal/httpframe"} {
			if pkg == old {
				t.Errorf("package %s exists again: its protocol lives in wire/", pkg)
			}
		}
		if pkg == "wire" || strings.HasPrefix(pkg, "wire/") {
			continue
		}
		for _, imp := range f[1:] {
			if protocolPkg(imp) {
				if _, ok := importers[pkg]; !ok {
					t.Errorf("%s imports %s: outside wire/, protocols are used through wire and wire/protocols (or add it to importers with the reason)", pkg, imp)
				}
			}
		}
	}
}

// libraries are the imports a protocol package may have besides the
// standard library and wire, and why.
var libraries = map[string]string{
	"golang.org/x/net/http2":       "wire/http2: the HTTP/2 framer (issue #25 names x/net/http2 for the wire format)",
	"golang.org/x/net/http2/hpack": "wire/http2, wire/grpc, wire/http2/inband: HPACK header blocks",
	module + "/wire/grpc":          "wire/http2: a gRPC call is an HTTP/2 stream; its decoded form splits the messages",
	module + "/wire/protobuf":      "wire/http2: gRPC messages decoded by field number or name",
	"github.com/jackc/pgx/v5/pgproto3": "wire/postgres: the PostgreSQL message codec of pgx, the driver most Go services use, " +
		"so the mock decodes and encodes messages exactly as the client it answers (three small packages, no init)",
}

// libraryPrefixes: protobuf-go's packages, for wire/protobuf.
var libraryPrefixes = []string{"google.golang.org/protobuf/"}

func allowedLibrary(imp string) bool {
	if _, ok := libraries[imp]; ok {
		return true
	}
	for _, p := range libraryPrefixes {
		if strings.HasPrefix(imp, p) {
			return true
		}
	}
	return false
}

// TestProtocolPackagesImportOnlyWire: a protocol package knows its
// protocol and nothing of who uses it (the standard library, wire, and the
// libraries above).
func TestProtocolPackagesImportOnlyWire(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"/wire/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg := strings.TrimPrefix(f[0], module+"/")
		if pkg == "wire/protocols" || strings.HasPrefix(pkg, "wire/wiretest") {
			continue
		}
		for _, imp := range f[1:] {
			if strings.Contains(strings.SplitN(imp, "/", 2)[0], ".") && imp != module+"/wire" && !allowedLibrary(imp) {
				t.Errorf("%s imports %s: a protocol package imports the standard library and wire only", pkg, imp)
			}
		}
	}
}
