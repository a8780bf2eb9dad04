// Package schema finds the protobuf descriptors by which gRPC messages are
// shown and compared by field name: a descriptor set file (protoc
// --descriptor_set_out --include_imports), or the gRPC server reflection
// service of the build under test, asked with grpc-go's reflection
// client.
package schema

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/retrace-dev/retrace/wire/protobuf/descriptors"
)

// Schema is wire/protobuf's: message types by name, gRPC methods by path.
type Schema = descriptors.Schema

// File reads a descriptor set file.
func File(path string) (*Schema, error) { return descriptors.Load(path) }

// maxFiles bounds the files one reflection walk asks for.
const maxFiles = 10000

// Reflect asks the gRPC server at target (http://HOST:PORT for plaintext
// h2c, https://HOST:PORT for TLS with tlsCfg, nil for the system's roots)
// for the descriptors of every service it lists and their imports, through
// the server reflection service (grpc.reflection.v1), and returns them as
// a schema. A server without reflection is an error that says so.
func Reflect(ctx context.Context, target string, tlsCfg *tls.Config) (*descriptors.Schema, error) {
	u, err := url.Parse(target)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("reflection: target %q is not a URL with a host", target)
	}
	creds := insecure.NewCredentials()
	switch u.Scheme {
	case "http":
	case "https":
		cfg := &tls.Config{}
		if tlsCfg != nil {
			cfg = tlsCfg.Clone()
		}
		creds = credentials.NewTLS(cfg)
	default:
		return nil, fmt.Errorf("reflection: target %q: scheme must be http or https", target)
	}
	host := u.Host
	if u.Port() == "" {
		port := "80"
		if u.Scheme == "https" {
			port = "443"
		}
		host += ":" + port
	}
	cc, err := grpc.NewClient("passthrough:///"+host, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, fmt.Errorf("reflection: %s: %w", target, err)
	}
	defer cc.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := rpb.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
	if err != nil {
		return nil, fmt.Errorf("reflection: %s: %w", target, err)
	}
	w := &walk{stream: stream, files: map[string]*descriptorpb.FileDescriptorProto{}}
	services, err := w.services()
	if err != nil {
		return nil, fmt.Errorf("reflection: %s: %w", target, err)
	}
	for _, svc := range services {
		if err := w.ask(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: svc}}); err != nil {
			return nil, fmt.Errorf("reflection: %s: service %s: %w", target, svc, err)
		}
	}
	// Imports the answers did not bring along.
	for {
		missing := w.missing()
		if len(missing) == 0 {
			break
		}
		for _, name := range missing {
			if err := w.ask(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_FileByFilename{FileByFilename: name}}); err != nil {
				return nil, fmt.Errorf("reflection: %s: file %s: %w", target, name, err)
			}
			if w.files[name] == nil {
				return nil, fmt.Errorf("reflection: %s: the server did not send file %s", target, name)
			}
		}
	}
	_ = stream.CloseSend()
	set := &descriptorpb.FileDescriptorSet{}
	for _, f := range w.files {
		set.File = append(set.File, f)
	}
	b, err := proto.Marshal(set)
	if err != nil {
		return nil, fmt.Errorf("reflection: %s: %w", target, err)
	}
	s, err := descriptors.Parse(b)
	if err != nil {
		return nil, fmt.Errorf("reflection: %s: %w", target, err)
	}
	return s, nil
}

// walk is one conversation with a reflection service.
type walk struct {
	stream rpb.ServerReflection_ServerReflectionInfoClient
	files  map[string]*descriptorpb.FileDescriptorProto
}

func (w *walk) services() ([]string, error) {
	if err := w.stream.Send(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_ListServices{}}); err != nil {
		return nil, err
	}
	resp, err := w.stream.Recv()
	if err != nil {
		return nil, fmt.Errorf("list services (does the server register grpc-go's reflection service?): %w", err)
	}
	if e := resp.GetErrorResponse(); e != nil {
		return nil, fmt.Errorf("list services: %s (code %d)", e.ErrorMessage, e.ErrorCode)
	}
	var out []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		if !strings.HasPrefix(s.Name, "grpc.reflection.") {
			out = append(out, s.Name)
		}
	}
	return out, nil
}

func (w *walk) ask(req *rpb.ServerReflectionRequest) error {
	if len(w.files) > maxFiles {
		return fmt.Errorf("more than %d descriptor files", maxFiles)
	}
	if err := w.stream.Send(req); err != nil {
		return err
	}
	resp, err := w.stream.Recv()
	if err != nil {
		return err
	}
	if e := resp.GetErrorResponse(); e != nil {
		return fmt.Errorf("%s (code %d)", e.ErrorMessage, e.ErrorCode)
	}
	fds := resp.GetFileDescriptorResponse()
	if fds == nil {
		return errors.New("the answer holds no file descriptors")
	}
	for _, b := range fds.FileDescriptorProto {
		fd := &descriptorpb.FileDescriptorProto{}
		if err := proto.Unmarshal(b, fd); err != nil {
			return fmt.Errorf("a file descriptor does not decode: %w", err)
		}
		w.files[fd.GetName()] = fd
	}
	return nil
}

// missing lists the imports of the files so far that are not among them.
func (w *walk) missing() []string {
	var out []string
	seen := map[string]bool{}
	for _, f := range w.files {
		for _, dep := range f.GetDependency() {
			if w.files[dep] == nil && !seen[dep] {
				seen[dep] = true
				out = append(out, dep)
			}
		}
	}
	return out
}
