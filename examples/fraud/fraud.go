package fraud

import (
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/dynamicpb"
)

// The rules, in cents and risk points. Check refuses an order whose score
// reaches DenyScore.
const (
	DenyScore       = 80
	highValueLine   = 50000  // a line worth this much is risky
	expensiveUnit   = 10000  // several units this dear are risky
	highValueTotal  = 150000 // an order above this is risky
	riskHighValue   = 20
	riskSeveralDear = 15
	riskAbroad      = 25
	riskBigTotal    = 30
	riskNewTier     = 15
)

// euCountries ship within the EU; anything else scores riskAbroad.
var euCountries = map[string]bool{"DE": true, "FR": true, "NL": true, "IT": true, "ES": true, "AT": true, "BE": true}

// Screen returns one Signal per line of o, in order: the risk each line
// carries on its own.
func Screen(o *Order) ([]Signal, error) {
	if len(o.Lines) == 0 {
		return nil, errors.New("the order has no lines")
	}
	out := make([]Signal, 0, len(o.Lines))
	for i, l := range o.Lines {
		if l.SKU == "" || l.Qty <= 0 || l.UnitCents < 0 {
			return nil, fmt.Errorf("line %d: sku %q, qty %d, unit %d cents is not a line", i, l.SKU, l.Qty, l.UnitCents)
		}
		value := int64(l.Qty) * l.UnitCents
		s := Signal{SKU: l.SKU, Risk: int32(value / 10000), Note: "ok"}
		if value >= highValueLine {
			s.Risk, s.Note = riskHighValue, "high-value line"
		}
		if l.Qty >= 3 && l.UnitCents >= expensiveUnit {
			s.Risk += riskSeveralDear
			s.Note += "; several expensive units"
		}
		out = append(out, s)
	}
	return out, nil
}

// Check scores o: half its screened risk plus the order's own risks.
func Check(o *Order) (*Verdict, error) {
	if o.UserID <= 0 {
		return nil, fmt.Errorf("user_id %d is not a user", o.UserID)
	}
	if o.Currency == "" || o.TotalCents < 0 {
		return nil, fmt.Errorf("total %d %q is not an amount", o.TotalCents, o.Currency)
	}
	v := &Verdict{Score: o.ScreenedRisk / 2}
	if o.ScreenedRisk > 0 {
		v.Reasons = append(v.Reasons, fmt.Sprintf("screened risk %d", o.ScreenedRisk))
	}
	if !euCountries[o.Country] {
		v.Score += riskAbroad
		v.Reasons = append(v.Reasons, "ships outside the EU ("+o.Country+")")
	}
	if o.TotalCents > highValueTotal {
		v.Score += riskBigTotal
		v.Reasons = append(v.Reasons, fmt.Sprintf("total %d.%02d %s", o.TotalCents/100, o.TotalCents%100, o.Currency))
	}
	if o.Tier == "standard" {
		v.Score += riskNewTier
		v.Reasons = append(v.Reasons, "standard tier")
	}
	v.Allow = v.Score < DenyScore
	return v, nil
}

// serviceDesc is the Fraud service as protoc-gen-go-grpc would generate it.
var serviceDesc = grpc.ServiceDesc{
	ServiceName: ServiceName,
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Check",
		Handler: func(_ any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := dynamicpb.NewMessage(schema.order)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(_ context.Context, req any) (any, error) {
				v, err := Check(orderOf(req.(*dynamicpb.Message)))
				if err != nil {
					return nil, status.Error(codes.InvalidArgument, err.Error())
				}
				return v.message(), nil
			}
			if icpt == nil {
				return h(ctx, in)
			}
			return icpt(ctx, in, &grpc.UnaryServerInfo{FullMethod: CheckMethod}, h)
		},
	}},
	Streams: []grpc.StreamDesc{{
		StreamName:    "Screen",
		ServerStreams: true,
		Handler: func(_ any, stream grpc.ServerStream) error {
			in := dynamicpb.NewMessage(schema.order)
			if err := stream.RecvMsg(in); err != nil {
				return err
			}
			sigs, err := Screen(orderOf(in))
			if err != nil {
				return status.Error(codes.InvalidArgument, err.Error())
			}
			for i := range sigs {
				if err := stream.SendMsg(sigs[i].message()); err != nil {
					return err
				}
			}
			return nil
		},
	}},
	Metadata: "retrace/examples/fraud/v1/fraud.proto",
}

// Register registers the Fraud service on s.
func Register(s grpc.ServiceRegistrar) { s.RegisterService(&serviceDesc, nil) }

// NewGRPCServer returns a gRPC server with the Fraud service, the health
// service (SERVING for "" and for ServiceName) and server reflection.
func NewGRPCServer(opts ...grpc.ServerOption) *grpc.Server {
	s := grpc.NewServer(opts...)
	Register(s)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(s, hs)
	reflection.Register(s)
	return s
}

// Client calls the Fraud service over a connection it does not own (one
// ClientConn is meant to be shared by every caller).
type Client struct {
	cc grpc.ClientConnInterface
}

// NewClient returns a Client calling over cc.
func NewClient(cc grpc.ClientConnInterface) *Client { return &Client{cc: cc} }

// Check asks for the verdict on o.
func (c *Client) Check(ctx context.Context, o *Order, opts ...grpc.CallOption) (*Verdict, error) {
	out := dynamicpb.NewMessage(schema.verdict)
	if err := c.cc.Invoke(ctx, CheckMethod, o.message(), out, opts...); err != nil {
		return nil, err
	}
	return verdictOf(out), nil
}

// Screen asks for the signals of o's lines and reads the whole stream.
func (c *Client) Screen(ctx context.Context, o *Order, opts ...grpc.CallOption) ([]Signal, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream if it is left early
	st, err := c.cc.NewStream(ctx, &serviceDesc.Streams[0], ScreenMethod, opts...)
	if err != nil {
		return nil, err
	}
	if err := st.SendMsg(o.message()); err != nil {
		return nil, err
	}
	if err := st.CloseSend(); err != nil {
		return nil, err
	}
	var out []Signal
	for {
		m := dynamicpb.NewMessage(schema.signal)
		err := st.RecvMsg(m)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, signalOf(m))
	}
}
