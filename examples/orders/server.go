package orders

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/retrace-dev/retrace/examples/fraud"
)

// Server is the order service: an http.Handler over its downstream clients.
// It opens no connection before the first request that needs one.
type Server struct {
	cfg     Config
	db      *sql.DB
	rdb     *redis.Client
	pricing *http.Client     // one keep-alive client shared by every request
	fraudCC *grpc.ClientConn // one connection shared by every request; nil without FraudAddr
	fraud   *fraud.Client
	mux     *http.ServeMux
}

var _ http.Handler = (*Server)(nil)

// NewServer returns a Server for cfg. It validates cfg and creates the
// clients; connections are made lazily by the first requests.
func NewServer(cfg Config) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	mc, err := mysqlConfig(cfg.MySQLDSN)
	if err != nil {
		return nil, err
	}
	conn, err := mysql.NewConnector(mc)
	if err != nil {
		return nil, fmt.Errorf("orders: MySQL DSN %q: %w", cfg.MySQLDSN, err)
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(cfg.MaxDBConns)
	db.SetMaxIdleConns(32)
	db.SetConnMaxIdleTime(time.Minute)
	var pricingTLS *tls.Config
	if cfg.PricingCA != "" {
		pem, err := os.ReadFile(cfg.PricingCA)
		if err != nil {
			return nil, fmt.Errorf("orders: pricing CA: %w", err)
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("orders: pricing CA %s: no PEM certificate in it", cfg.PricingCA)
		}
		pricingTLS = &tls.Config{RootCAs: roots}
	}
	s := &Server{
		cfg: cfg,
		db:  db,
		rdb: redis.NewClient(&redis.Options{
			Addr: cfg.RedisAddr,
			// No background maintenance: every Redis byte belongs to a request.
			MinIdleConns: 0,
		}),
		pricing: &http.Client{
			Timeout: cfg.Timeout,
			Transport: &http.Transport{
				DialContext:         (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
				MaxIdleConns:        64,
				MaxIdleConnsPerHost: 64,
				IdleConnTimeout:     90 * time.Second,
				TLSClientConfig:     pricingTLS,
			},
		},
	}
	if cfg.FraudAddr != "" {
		// grpc.NewClient connects on the first call.
		cc, err := grpc.NewClient(cfg.FraudAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			db.Close()
			return nil, fmt.Errorf("orders: fraud service %s: %w", cfg.FraudAddr, err)
		}
		s.fraudCC, s.fraud = cc, fraud.NewClient(cc)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", s.createOrder)
	mux.HandleFunc("GET /orders/{id}", s.getOrder)
	mux.HandleFunc("GET /users/{id}/orders", s.userOrders)
	mux.HandleFunc("GET /stock/{sku}", s.stock)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"ok": true, "variant": s.cfg.Variant})
	})
	s.mux = mux
	return s, nil
}

// DB returns the service's MySQL handle (for schema creation and seeding).
func (s *Server) DB() *sql.DB { return s.db }

// Redis returns the service's Redis client (for seeding).
func (s *Server) Redis() *redis.Client { return s.rdb }

// Config returns the effective configuration, defaults filled in.
func (s *Server) Config() Config { return s.cfg }

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Close closes the downstream clients and their idle connections.
func (s *Server) Close() error {
	s.pricing.CloseIdleConnections()
	var ferr error
	if s.fraudCC != nil {
		ferr = s.fraudCC.Close()
	}
	return errors.Join(s.db.Close(), s.rdb.Close(), ferr)
}

// Setup creates the schema and seeds the data through the server's own
// clients.
func (s *Server) Setup(ctx context.Context) error {
	if err := CreateSchema(ctx, s.db); err != nil {
		return err
	}
	return Seed(ctx, s.db, s.rdb, s.cfg.RedisPrefix)
}

// apiError is an error with the HTTP status it maps to.
type apiError struct {
	code int
	msg  string
}

func (e *apiError) Error() string { return e.msg }

func errorf(code int, format string, args ...any) error {
	return &apiError{code: code, msg: fmt.Sprintf(format, args...)}
}

// fail writes err as a JSON error: its own status for an apiError, 502 for
// anything else (a downstream failed).
func fail(w http.ResponseWriter, err error) {
	var ae *apiError
	if errors.As(err, &ae) {
		writeJSON(w, ae.code, map[string]string{"error": ae.msg})
		return
	}
	writeJSON(w, http.StatusBadGateway, map[string]string{"error": err.Error()})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}
