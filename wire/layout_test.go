package wire_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strconv"
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
	"internal/demo":       "the demo narrates the fraud service's gRPC calls by field name (wire/http2.DecodeMessage with the service's descriptors)",
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
	"github.com/andybalholm/brotli": "wire/http1: bodies in the br content coding are decoded to be masked and encoded again " +
		"(the agent linked it for masking before wire/ existed)",
	module + "/wire/http1":        "wire/http2/h2mask: an HTTP/2 body is masked as an HTTP body (content codings, JSON, forms)",
	module + "/wire/http2/h2mask": "wire/http2: its Protocol masks through the light masker the agent links",
	module + "/wire/grpc":         "wire/http2: a gRPC call is an HTTP/2 stream; its decoded form splits the messages",
	module + "/wire/protobuf":     "wire/http2: gRPC messages decoded by field number or name",
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

// TestRecordingParsesNoProtocol: recording masks every payload through
// wire/protocols (wire.Masker); it does not regain a protocol's parsing:
// none of the packages HTTP parsing needs, and no literal that only a
// parser of HTTP/1, RESP or MySQL would hold.
func TestRecordingParsesNoProtocol(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{join .Imports \" \"}}", module+"/recording").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	banned := map[string]string{
		"net/url": "query and form decoding", "net/http": "HTTP", "net/textproto": "MIME headers",
		"mime": "content types", "mime/multipart": "multipart bodies", "compress/zlib": "the deflate content coding",
		"github.com/andybalholm/brotli": "the br content coding",
		module + "/wire/mysql":          "MySQL", module + "/wire/redis": "RESP", module + "/wire/http1": "HTTP/1",
	}
	for _, imp := range strings.Fields(string(out)) {
		if why, ok := banned[imp]; ok {
			t.Errorf("recording imports %s (%s): masking goes through wire.Masker", imp, why)
		}
	}
	markers := []string{"HTTP/", "content-length", "transfer-encoding", "content-encoding", "\r\n\r\n", "\r\n$",
		"x-www-form-urlencoded", "application/grpc"}
	files, err := filepath.Glob("../recording/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no recording sources: %v", err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok {
				return true
			}
			switch lit.Kind {
			case token.STRING:
				v, err := strconv.Unquote(lit.Value)
				if err != nil {
					return true
				}
				for _, m := range markers {
					if strings.Contains(strings.ToLower(v), strings.ToLower(m)) {
						t.Errorf("%s: literal %s holds %q: a protocol is parsed in recording (move it to its wire/ package)",
							fset.Position(lit.Pos()), lit.Value, m)
					}
				}
			case token.INT:
				if lit.Value == "0xffffff" {
					t.Errorf("%s: MySQL's packet size in recording", fset.Position(lit.Pos()))
				}
			}
			return true
		})
	}
}
