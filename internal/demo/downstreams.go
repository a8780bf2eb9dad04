package demo

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/alicebob/miniredis/v2"
	"google.golang.org/grpc"

	"github.com/retrace-dev/retrace/examples/fraud"
	"github.com/retrace-dev/retrace/examples/orders"
	"github.com/retrace-dev/retrace/examples/pricing"
	"github.com/retrace-dev/retrace/internal/certtest"
)

// DownstreamAddrs are the addresses the embedded downstreams listen on;
// empty fields pick free loopback ports.
type DownstreamAddrs struct {
	MySQL, Redis, Pricing, Fraud string
	// CAFile is where the PEM certificate of the CA that signed the
	// pricing service's certificate is written; empty: a temporary file.
	CAFile string
}

// Downstreams are the orders example's four downstreams, embedded in this
// process: MySQL (go-mysql-server), Redis (miniredis), the pricing service
// (HTTPS) and the fraud-check service (gRPC). Stop and Restart keep the
// data and the addresses, so the demo can take them away during a replay
// and bring them back for the load test.
type Downstreams struct {
	MySQL   *MySQL
	Redis   *miniredis.Miniredis
	pricing *httpService
	fraud   *grpcService
	cfg     orders.Config // addresses fixed at start: they survive Stop
	caDir   string        // holds the pricing service's CA certificate
}

// StartDownstreams starts the downstreams and loads the orders schema and
// seed data.
func StartDownstreams(ctx context.Context, a DownstreamAddrs) (_ *Downstreams, err error) {
	d := &Downstreams{}
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	if a.MySQL == "" {
		a.MySQL = "127.0.0.1:0"
	}
	if a.Redis == "" {
		a.Redis = "127.0.0.1:0"
	}
	if a.Pricing == "" {
		a.Pricing = "127.0.0.1:0"
	}
	if a.Fraud == "" {
		a.Fraud = "127.0.0.1:0"
	}
	if d.MySQL, err = StartMySQL(a.MySQL, "orders"); err != nil {
		return nil, err
	}
	d.Redis = miniredis.NewMiniRedis()
	if err = d.Redis.StartAddr(a.Redis); err != nil {
		d.Redis = nil
		return nil, fmt.Errorf("demo: embedded Redis on %s: %w", a.Redis, err)
	}
	// the pricing service serves HTTPS, with a certificate made now by a
	// CA of the demo's own, which the orders service is told to trust
	ca, err := certtest.NewCA()
	if err != nil {
		return nil, err
	}
	cert, err := ca.Leaf("127.0.0.1", "localhost")
	if err != nil {
		return nil, err
	}
	caFile := a.CAFile
	if caFile == "" {
		if d.caDir, err = os.MkdirTemp("", "retrace-demo-ca-"); err != nil {
			return nil, err
		}
		if caFile, err = ca.WritePEM(d.caDir); err != nil {
			return nil, err
		}
	} else if err := os.WriteFile(caFile, ca.PEM(), 0o644); err != nil {
		return nil, fmt.Errorf("demo: pricing CA: %w", err)
	}
	// the fraud service first: whoever waits for the pricing service to
	// answer finds the fraud service listening too
	d.fraud = &grpcService{addr: a.Fraud}
	if err := d.fraud.restart(); err != nil {
		return nil, fmt.Errorf("demo: fraud service: %w", err)
	}
	d.pricing = &httpService{addr: a.Pricing, h: pricing.NewHandler(), tls: &tls.Config{Certificates: []tls.Certificate{cert}}}
	if err := d.pricing.restart(); err != nil {
		return nil, fmt.Errorf("demo: pricing service: %w", err)
	}
	d.cfg = orders.Config{MySQLDSN: d.MySQL.DSN(), RedisAddr: d.Redis.Addr(), PricingURL: "https://" + d.pricing.addr,
		PricingCA: caFile, FraudAddr: d.fraud.addr}
	srv, err := orders.NewServer(d.cfg)
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	if err = srv.Setup(ctx); err != nil {
		return nil, err
	}
	return d, nil
}

// OrdersConfig is the configuration of an orders service using d.
func (d *Downstreams) OrdersConfig() orders.Config { return d.cfg }

// PricingURL is the base URL of the pricing service.
func (d *Downstreams) PricingURL() string { return d.cfg.PricingURL }

// FraudAddr is the host:port of the fraud-check service.
func (d *Downstreams) FraudAddr() string { return d.cfg.FraudAddr }

// RedisAddr is the host:port of Redis (also while stopped).
func (d *Downstreams) RedisAddr() string { return d.cfg.RedisAddr }

// Env is OrdersConfig as the ORDERS_* environment of a child process.
func (d *Downstreams) Env() []string {
	c := d.OrdersConfig()
	return []string{orders.EnvMySQLDSN + "=" + c.MySQLDSN, orders.EnvRedisAddr + "=" + c.RedisAddr,
		orders.EnvPricingURL + "=" + c.PricingURL, orders.EnvPricingCA + "=" + c.PricingCA, orders.EnvFraudAddr + "=" + c.FraudAddr}
}

// Stop stops all four, keeping data and addresses.
func (d *Downstreams) Stop() error {
	var errs []error
	if d.MySQL != nil {
		errs = append(errs, d.MySQL.Stop())
	}
	if d.Redis != nil {
		d.Redis.Close()
	}
	if d.pricing != nil {
		errs = append(errs, d.pricing.stop())
	}
	if d.fraud != nil {
		errs = append(errs, d.fraud.stop())
	}
	return errors.Join(errs...)
}

// Restart serves the data again on the same addresses.
func (d *Downstreams) Restart() error {
	if err := d.MySQL.Restart(); err != nil {
		return err
	}
	if err := d.Redis.Restart(); err != nil {
		return fmt.Errorf("demo: embedded Redis on %s: %w", d.cfg.RedisAddr, err)
	}
	if err := d.fraud.restart(); err != nil {
		return err
	}
	return d.pricing.restart()
}

// Close stops everything for good.
func (d *Downstreams) Close() error {
	err := d.Stop()
	if d.caDir != "" {
		os.RemoveAll(d.caDir)
	}
	return err
}

// httpService is an http.Server that can be stopped and restarted on the
// same address.
type httpService struct {
	addr string
	tls  *tls.Config // serve HTTPS with it; nil: HTTP
	h    http.Handler
	srv  *http.Server
	done chan error
}

func (s *httpService) restart() error {
	if s.srv != nil {
		return fmt.Errorf("demo: %s is running", s.addr)
	}
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return err
	}
	s.addr = ln.Addr().String()
	if s.tls != nil {
		ln = tls.NewListener(ln, s.tls)
	}
	s.srv = &http.Server{Handler: s.h, ReadHeaderTimeout: 10 * time.Second}
	s.done = make(chan error, 1)
	srv := s.srv
	go func() { s.done <- srv.Serve(ln) }()
	return nil
}

func (s *httpService) stop() error {
	if s.srv == nil {
		return nil
	}
	err := s.srv.Close()
	<-s.done
	s.srv = nil
	return err
}

// grpcService is the fraud-check service's gRPC server, which can be
// stopped and restarted on the same address.
type grpcService struct {
	addr string
	srv  *grpc.Server
	done chan error
}

func (s *grpcService) restart() error {
	if s.srv != nil {
		return fmt.Errorf("demo: %s is running", s.addr)
	}
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return err
	}
	s.addr = ln.Addr().String()
	s.srv = fraud.NewGRPCServer()
	s.done = make(chan error, 1)
	srv := s.srv
	go func() { s.done <- srv.Serve(ln) }()
	return nil
}

func (s *grpcService) stop() error {
	if s.srv == nil {
		return nil
	}
	s.srv.Stop()
	err := <-s.done
	s.srv = nil
	return err
}
