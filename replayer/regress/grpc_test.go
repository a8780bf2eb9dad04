package regress_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/retrace-dev/retrace/internal/certtest"
	"github.com/retrace-dev/retrace/internal/grpctest"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/replayer/diff"
	"github.com/retrace-dev/retrace/replayer/regress"
	"github.com/retrace-dev/retrace/replayer/replaytest"
	"github.com/retrace-dev/retrace/replayer/schema"
	"github.com/retrace-dev/retrace/wire/http2"
	"github.com/retrace-dev/retrace/wire/protobuf/descriptors"
)

// grpcTraces is how many traces the recording makes.
const grpcTraces = 16

func replayGRPC(t *testing.T, cfg regress.Config) *collected {
	t.Helper()
	var c collected
	if err := regress.Run(context.Background(), cfg, c.add); err != nil {
		t.Fatal(err)
	}
	return &c
}

func testSchema(t *testing.T) *descriptors.Schema {
	t.Helper()
	s, err := descriptors.Of(testpb.File_grpc_testing_test_proto, healthpb.File_grpc_health_v1_health_proto)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func findings(c *collected, session string) []regress.Finding {
	for _, r := range c.results {
		if r.Session == session {
			return r.Findings
		}
	}
	return nil
}

func TestReplayGRPCSessions(t *testing.T) {
	sessions := replaytest.RecordGRPC(t, grpcTraces)

	t.Run("identical build passes", func(t *testing.T) {
		c := replayGRPC(t, regress.Config{Source: regress.Sessions(sessions), Target: replaytest.ServeGRPC(t, &grpctest.Service{}), Concurrency: 16})
		if len(c.results) != len(sessions) {
			t.Fatalf("%d results for %d sessions", len(c.results), len(sessions))
		}
		for _, r := range c.results {
			if r.Status != regress.Passed {
				t.Errorf("%s: %s %s %v", r.Session, r.Status, r.Error, r.Findings)
			}
			if !strings.HasPrefix(r.API, "POST /grpc.testing.TestService/") && r.API != "POST /grpc.health.v1.Health/Check" {
				t.Errorf("%s: API %q", r.Session, r.API)
			}
		}
	})

	t.Run("h2 over TLS", func(t *testing.T) {
		ca := certtest.New(t)
		target := replaytest.ServeGRPCTLS(t, &grpctest.Service{}, ca.ServerConfig(t))
		c := replayGRPC(t, regress.Config{Source: regress.Sessions(sessions), Target: target, Concurrency: 16, TLS: ca.ClientConfig()})
		if n := len(c.byStatus(regress.Passed)); n != len(sessions) {
			t.Fatalf("%d of %d passed: %+v", n, len(sessions), c.results[0])
		}
		c = replayGRPC(t, regress.Config{Source: regress.Sessions(sessions[:1]), Target: target})
		if len(c.results) != 1 || c.results[0].Status != regress.Errored || !strings.Contains(c.results[0].Error, "certificate") {
			t.Fatalf("untrusted certificate: %+v", c.results[0])
		}
	})

	t.Run("changed field fails by field number and by name", func(t *testing.T) {
		target := replaytest.ServeGRPC(t, &replaytest.ChangedGRPC{Username: "someone else"})
		c := replayGRPC(t, regress.Config{Source: regress.Sessions(sessions), Target: target, Concurrency: 8})
		assertOnly(t, c, "-unary", "message[0].2")
		c = replayGRPC(t, regress.Config{Source: regress.Sessions(sessions), Target: target, Concurrency: 8, Schema: testSchema(t)})
		assertOnly(t, c, "-unary", "message[0].username")
		f := findings(c, "t03-unary")
		if len(f) != 1 || f[0].Want != "retrace" || f[0].Got != "someone else" {
			t.Errorf("finding %+v", f)
		}
	})

	t.Run("changed status fails", func(t *testing.T) {
		c := replayGRPC(t, regress.Config{Source: regress.Sessions(sessions), Target: replaytest.ServeGRPC(t, &replaytest.ChangedGRPC{Code: codes.Internal}), Concurrency: 8})
		assertOnly(t, c, "-status", "grpc-status")
		f := findings(c, "t00-status")
		if len(f) != 1 || f[0].Want != "5" || f[0].Got != "13" {
			t.Errorf("findings %+v", f)
		}
	})

	t.Run("ignore and tolerance rules", func(t *testing.T) {
		target := replaytest.ServeGRPC(t, &replaytest.ChangedGRPC{Username: "x", SizeAdd: 2})
		c := replayGRPC(t, regress.Config{Source: regress.Sessions(sessions), Target: target, Concurrency: 8, Schema: testSchema(t)})
		if n := len(c.byStatus(regress.Failed)); n != 2*grpcTraces {
			t.Fatalf("%d failed without rules, want %d", n, 2*grpcTraces)
		}
		assertPaths(t, findings(c, "t01-in"), "message[0].aggregated_payload_size")
		rules, err := diff.NewRules(
			diff.Rule{API: "POST /grpc.testing.TestService/UnaryCall", Ignore: "message[*].username"},
			diff.Rule{Tolerance: "message[0].aggregated_payload_size", Abs: 2},
		)
		if err != nil {
			t.Fatal(err)
		}
		c = replayGRPC(t, regress.Config{Source: regress.Sessions(sessions), Target: target, Concurrency: 8, Schema: testSchema(t), Rules: rules})
		if failed := c.byStatus(regress.Failed); len(failed) > 0 || len(c.byStatus(regress.Passed)) != len(sessions) {
			t.Fatalf("with rules: failed %v", failed)
		}
	})

	t.Run("noise detected on message fields", func(t *testing.T) {
		cfg := regress.Config{Source: regress.Sessions(sessions), Target: replaytest.ServeGRPC(t, &replaytest.ChangedGRPC{Noisy: true}), Concurrency: 8, Schema: testSchema(t)}
		n, err := regress.DetectNoise(context.Background(), cfg, regress.NoiseConfig{PerAPI: 2, Runs: 2})
		if err != nil {
			t.Fatal(err)
		}
		if len(n.Rules) != 1 || n.Rules[0].API != "POST /grpc.testing.TestService/UnaryCall" || n.Rules[0].Ignore != "message[0].server_id" {
			t.Fatalf("noise rules %+v", n.Rules)
		}
		if c := replayGRPC(t, cfg); len(c.byStatus(regress.Failed)) != grpcTraces {
			t.Fatalf("without the noise rules %d failed", len(c.byStatus(regress.Failed)))
		}
		if cfg.Rules, err = diff.NewRules(n.Rules...); err != nil {
			t.Fatal(err)
		}
		if c := replayGRPC(t, cfg); len(c.byStatus(regress.Passed)) != len(sessions) {
			t.Fatalf("with the noise rules: failed %v", c.byStatus(regress.Failed))
		}
	})

	t.Run("undecodable session is an error", func(t *testing.T) {
		bad := *sessions[0]
		m, pace, err := http2.ParseMessage(bad.Inbound.Response)
		if err != nil {
			t.Fatal(err)
		}
		m.Data = []byte("\x00\x00\x00\x00\x03\xff\xff\xff") // one message, not protobuf
		bad.Inbound.Response = http2.AppendMessage(nil, m, pace)
		bad.ID = "undecodable"
		c := replayGRPC(t, regress.Config{Source: regress.Sessions([]*recording.Session{&bad}), Target: replaytest.ServeGRPC(t, &grpctest.Service{})})
		if len(c.results) != 1 || c.results[0].Status != regress.Errored || !strings.Contains(c.results[0].Error, "not protobuf") {
			t.Fatalf("results %+v", c.results[0])
		}
	})

	t.Run("descriptor set file and reflection name fields", func(t *testing.T) {
		set := &descriptorpb.FileDescriptorSet{File: []*descriptorpb.FileDescriptorProto{
			protodesc.ToFileDescriptorProto(testpb.File_grpc_testing_empty_proto),
			protodesc.ToFileDescriptorProto(testpb.File_grpc_testing_messages_proto),
			protodesc.ToFileDescriptorProto(testpb.File_grpc_testing_test_proto),
		}}
		b, err := proto.Marshal(set)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "test.protoset")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		fromFile, err := schema.File(path)
		if err != nil {
			t.Fatal(err)
		}
		target := replaytest.ServeGRPC(t, &replaytest.ChangedGRPC{Username: "y"})
		fromServer, err := schema.Reflect(context.Background(), target, nil)
		if err != nil {
			t.Fatal(err)
		}
		for name, s := range map[string]*descriptors.Schema{"file": fromFile, "reflection": fromServer} {
			c := replayGRPC(t, regress.Config{Source: regress.Sessions(sessions), Target: target, Concurrency: 8, Schema: s})
			f := findings(c, "t05-unary")
			if len(f) != 1 || f[0].Path != "message[0].username" {
				t.Errorf("%s: findings %+v", name, f)
			}
		}
	})
}

// assertOnly checks that exactly the sessions whose id ends in suffix
// failed, each with differences at paths, and that every other passed.
func assertOnly(t *testing.T, c *collected, suffix string, paths ...string) {
	t.Helper()
	for _, r := range c.results {
		switch {
		case strings.HasSuffix(r.Session, suffix):
			if r.Status != regress.Failed {
				t.Errorf("%s: %s %s, want failed", r.Session, r.Status, r.Error)
				continue
			}
			assertPaths(t, r.Findings, paths...)
		case r.Status != regress.Passed:
			t.Errorf("%s: %s %s %v, want passed", r.Session, r.Status, r.Error, r.Findings)
		}
	}
}

func assertPaths(t *testing.T, fs []regress.Finding, paths ...string) {
	t.Helper()
	var got []string
	for _, f := range fs {
		got = append(got, f.Path)
	}
	if strings.Join(got, " ") != strings.Join(paths, " ") {
		t.Errorf("difference paths %v, want %v (%+v)", got, paths, fs)
	}
}
