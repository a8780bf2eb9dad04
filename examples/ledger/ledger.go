// Package ledger is an example service on PostgreSQL for retrace's demo
// story and end-to-end tests: money moved between accounts in a
// transaction (pgx v5, a pgxpool in its default query mode, so prepared
// statements are cached per connection) and accounts read with a pgx
// Batch. At start-up, as services do, it pings PostgreSQL, asks its
// version, sets up each new connection of the pool (AfterConnect) and
// migrates a table with gorm (Migrate). Run it with RETRACE_MODE=record and every request's PostgreSQL
// calls are recorded; with RETRACE_MODE=replay they are answered by the
// mock server, with no PostgreSQL running.
//
//	POST /transfers {"from":1,"to":2,"amount":"12.50","memo":"rent"}
//	     → 201 {"id":7,"from":{"id":1,"balance":"87.50"},"to":{…}}
//	     → 409 when the payer lacks the funds, 404 for an unknown account
//	GET  /accounts/{id} → 200 {"id":1,"owner":"…","balance":"…","entries":[…]}
package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// Variants of the service: Changed credits the payee one cent less, a
// regression the replay's downstream diff shows in the UPDATE's
// parameters.
const (
	VariantNone    = ""
	VariantChanged = "changed"
)

// ListeningPrefix starts the line ListenAndServe writes once it accepts
// connections; the address follows it.
const ListeningPrefix = "ledger: listening on "

// Config says where the service's PostgreSQL is.
type Config struct {
	// PostgresURL is a pgx connection string (URL or key=value). A
	// search_path parameter names the schema the tables live in, which
	// Setup creates (tests run side by side in schemas of their own).
	PostgresURL string
	// MaxConns caps the pool; zero means 8.
	MaxConns int32
	// Variant is VariantNone or VariantChanged.
	Variant string
}

// Server is the ledger service.
type Server struct {
	pool    *pgxpool.Pool
	url     string
	schema  string // search_path of the URL, "" for none
	variant string
	mux     *http.ServeMux
	// Version is what PostgreSQL's version() said at start-up.
	Version string
}

// Statement timeout each connection of the pool sets when it opens.
const connSetup = "SET statement_timeout = '30s'"

// NewServer connects the pool and pings PostgreSQL, as services do at
// start-up.
func NewServer(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Variant != VariantNone && cfg.Variant != VariantChanged {
		return nil, fmt.Errorf("ledger: variant %q: want %q or %q", cfg.Variant, VariantNone, VariantChanged)
	}
	pc, err := pgxpool.ParseConfig(cfg.PostgresURL)
	if err != nil {
		return nil, fmt.Errorf("ledger: PostgreSQL URL: %w", err)
	}
	pc.MaxConns = 8
	if cfg.MaxConns > 0 {
		pc.MaxConns = cfg.MaxConns
	}
	pc.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, connSetup)
		return err
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("ledger: pinging PostgreSQL: %w", err)
	}
	s := &Server{pool: pool, url: cfg.PostgresURL, variant: cfg.Variant, mux: http.NewServeMux(), schema: pc.ConnConfig.RuntimeParams["search_path"]}
	if err := pool.QueryRow(ctx, "SELECT version()").Scan(&s.Version); err != nil {
		pool.Close()
		return nil, fmt.Errorf("ledger: asking PostgreSQL's version: %w", err)
	}
	s.mux.HandleFunc("POST /transfers", s.transfer)
	s.mux.HandleFunc("GET /accounts/{id}", s.account)
	return s, nil
}

// Close closes the pool.
func (s *Server) Close() { s.pool.Close() }

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Accounts is how many accounts Setup creates, with ids 1..Accounts.
const Accounts = 50

// Setup creates the schema and the accounts, each with a balance of
// 1000.00, replacing what was there.
func (s *Server) Setup(ctx context.Context) error {
	if s.schema != "" {
		if _, err := s.pool.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{s.schema}.Sanitize()); err != nil {
			return fmt.Errorf("ledger: creating schema %q: %w", s.schema, err)
		}
	}
	for _, q := range []string{
		`DROP TABLE IF EXISTS entries, accounts`,
		`CREATE TABLE accounts (id int PRIMARY KEY, owner text NOT NULL, balance numeric(14,2) NOT NULL CHECK (balance >= 0))`,
		`CREATE TABLE entries (id bigserial PRIMARY KEY, account int NOT NULL REFERENCES accounts, amount numeric(14,2) NOT NULL,
			memo text NOT NULL, at timestamptz NOT NULL)`,
		fmt.Sprintf(`INSERT INTO accounts SELECT i, 'owner-' || i, 1000 FROM generate_series(1, %d) i`, Accounts),
	} {
		if _, err := s.pool.Exec(ctx, q); err != nil {
			return fmt.Errorf("ledger: setting up the schema: %w", err)
		}
	}
	return nil
}

// Audit is a table the service migrates with gorm at start-up.
type Audit struct {
	ID     int64 `gorm:"primaryKey"`
	Action string
	At     time.Time
}

// Migrate brings the audit table to the model's schema with gorm's
// AutoMigrate, as gorm services do at start-up (after Setup, which
// creates the schema).
func (s *Server) Migrate(ctx context.Context) error {
	db, err := gorm.Open(postgres.Open(s.url), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return fmt.Errorf("ledger: gorm: %w", err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		return fmt.Errorf("ledger: gorm: %w", err)
	}
	defer sqlDB.Close()
	if err := db.WithContext(ctx).AutoMigrate(&Audit{}); err != nil {
		return fmt.Errorf("ledger: migrating the audit table: %w", err)
	}
	return nil
}

type transferReq struct {
	From   int    `json:"from"`
	To     int    `json:"to"`
	Amount string `json:"amount"`
	Memo   string `json:"memo"`
}

type balance struct {
	ID      int    `json:"id"`
	Balance string `json:"balance"`
}

// errFunds is a transfer the payer cannot afford.
var errFunds = errors.New("insufficient funds")

func (s *Server) transfer(w http.ResponseWriter, r *http.Request) {
	var req transferReq
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&req); err != nil || req.From == req.To || req.Amount == "" {
		http.Error(w, "want {from, to, amount, memo} with two accounts", http.StatusBadRequest)
		return
	}
	credit := req.Amount
	if s.variant == VariantChanged {
		credit = lessOneCent(req.Amount)
	}
	var id int64
	var from, to balance
	err := pgx.BeginFunc(r.Context(), s.pool, func(tx pgx.Tx) error {
		var have bool
		if err := tx.QueryRow(r.Context(), `SELECT balance >= $2::numeric FROM accounts WHERE id = $1 FOR UPDATE`, req.From, req.Amount).Scan(&have); err != nil {
			return err
		}
		if !have {
			return errFunds
		}
		now := time.Now().UTC()
		if err := tx.QueryRow(r.Context(), `UPDATE accounts SET balance = balance - $2::numeric WHERE id = $1 RETURNING id, balance::text`,
			req.From, req.Amount).Scan(&from.ID, &from.Balance); err != nil {
			return err
		}
		if err := tx.QueryRow(r.Context(), `UPDATE accounts SET balance = balance + $2::numeric WHERE id = $1 RETURNING id, balance::text`,
			req.To, credit).Scan(&to.ID, &to.Balance); err != nil {
			return err
		}
		return tx.QueryRow(r.Context(), `INSERT INTO entries (account, amount, memo, at) VALUES ($1, -$3::numeric, $4, $5), ($2, $3::numeric, $4, $5) RETURNING id`,
			req.From, req.To, req.Amount, req.Memo, now).Scan(&id)
	})
	switch {
	case errors.Is(err, errFunds):
		http.Error(w, "insufficient funds", http.StatusConflict)
		return
	case errors.Is(err, pgx.ErrNoRows):
		http.Error(w, "no such account", http.StatusNotFound)
		return
	case err != nil:
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"id": id, "from": from, "to": to})
}

// lessOneCent is the changed variant's bug: amount minus 0.01.
func lessOneCent(amount string) string {
	f, err := strconv.ParseFloat(amount, 64)
	if err != nil {
		return amount
	}
	return strconv.FormatFloat(f-0.01, 'f', 2, 64)
}

func (s *Server) account(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.Atoi(r.PathValue("id"))
	if err != nil {
		http.Error(w, "account id must be a number", http.StatusBadRequest)
		return
	}
	b := &pgx.Batch{}
	b.Queue(`SELECT owner, balance::text FROM accounts WHERE id = $1`, id)
	b.Queue(`SELECT amount::text, memo FROM entries WHERE account = $1 ORDER BY id DESC LIMIT 3`, id)
	br := s.pool.SendBatch(r.Context(), b)
	defer br.Close()
	var owner, bal string
	if err := br.QueryRow().Scan(&owner, &bal); errors.Is(err, pgx.ErrNoRows) {
		http.Error(w, "no such account", http.StatusNotFound)
		return
	} else if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	rows, err := br.Query()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	type entry struct {
		Amount string `json:"amount"`
		Memo   string `json:"memo"`
	}
	entries, err := pgx.CollectRows(rows, pgx.RowToStructByPos[entry])
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "owner": owner, "balance": bal, "entries": entries})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// ListenAndServe serves s on addr until ctx ends, writing ListeningPrefix
// and the bound address to log once it listens.
func (s *Server) ListenAndServe(ctx context.Context, addr string, log io.Writer) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("ledger: listen on %s: %w", addr, err)
	}
	hs := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	fmt.Fprintf(log, "%s%s\n", ListeningPrefix, ln.Addr())
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = hs.Shutdown(sctx)
	<-errc
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
