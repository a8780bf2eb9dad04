package demo

import (
	"context"
	"fmt"
	"net"
	"sync"

	sqle "github.com/dolthub/go-mysql-server"
	"github.com/dolthub/go-mysql-server/memory"
	"github.com/dolthub/go-mysql-server/server"
	"github.com/dolthub/go-mysql-server/sql"
	"github.com/dolthub/vitess/go/mysql"
	"github.com/dolthub/vitess/go/sqltypes"
	querypb "github.com/dolthub/vitess/go/vt/proto/query"
)

// MySQL is an in-memory MySQL-compatible server (dolthub/go-mysql-server)
// on a loopback port: the demo's stand-in for a real database. It speaks
// the MySQL wire protocol, text and prepared-statement commands included,
// to go-sql-driver/mysql.
type MySQL struct {
	pro    *memory.DbProvider
	engine *sqle.Engine
	db     string
	addr   string
	mu     sync.Mutex     // serialises every command: the memory engine is not safe for concurrent use
	srv    *server.Server // nil while stopped
	done   chan error
}

// StartMySQL starts an in-memory MySQL server with one empty database named
// dbName on addr ("127.0.0.1:0" picks a free port). It accepts user root
// without a password.
func StartMySQL(addr, dbName string) (*MySQL, error) {
	db := memory.NewDatabase(dbName)
	db.BaseDatabase.EnablePrimaryKeyIndexes()
	pro := memory.NewDBProvider(db)
	m := &MySQL{pro: pro, engine: sqle.NewDefault(pro), db: dbName, addr: addr}
	if err := m.Restart(); err != nil {
		return nil, err
	}
	return m, nil
}

// Restart serves the same data again on the same address after Stop.
func (m *MySQL) Restart() error {
	if m.srv != nil {
		return fmt.Errorf("demo: embedded MySQL on %s is running", m.addr)
	}
	ln, err := net.Listen("tcp", m.addr)
	if err != nil {
		return fmt.Errorf("demo: embedded MySQL: listen on %s: %w", m.addr, err)
	}
	m.addr = ln.Addr().String()
	cfg := server.Config{Protocol: "tcp", Address: m.addr, Listener: ln}
	srv, err := server.NewServerWithHandler(cfg, m.engine, sql.NewContext, memory.NewSessionBuilder(m.pro), nil,
		func(h mysql.Handler) (mysql.Handler, error) { return &serialHandler{Handler: h, mu: &m.mu}, nil })
	if err != nil {
		ln.Close()
		return fmt.Errorf("demo: embedded MySQL on %s: %w", m.addr, err)
	}
	m.srv, m.done = srv, make(chan error, 1)
	go func() { m.done <- srv.Start() }()
	return nil
}

// Addr is the host:port the server listens on.
func (m *MySQL) Addr() string { return m.addr }

// DSN is a go-sql-driver/mysql DSN of the server's database.
func (m *MySQL) DSN() string {
	return fmt.Sprintf("root@tcp(%s)/%s?parseTime=true", m.addr, m.db)
}

// Stop closes the listener and every connection and waits; the data stays
// for Restart. Stopping a stopped server does nothing.
func (m *MySQL) Stop() error {
	if m.srv == nil {
		return nil
	}
	err := m.srv.Close()
	<-m.done
	m.srv = nil
	return err
}

// Close stops the server for good.
func (m *MySQL) Close() error { return m.Stop() }

// serialHandler runs one command at a time. go-mysql-server's memory
// engine races when statements run concurrently (sorting a table's rows on
// insert while another statement scans them, seen with -race), and the demo
// sends many concurrent clients; a command holds the lock while its result
// is written, which is fine for a demo database on loopback.
type serialHandler struct {
	mysql.Handler
	mu *sync.Mutex
}

func (h *serialHandler) ComInitDB(c *mysql.Conn, schema string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.Handler.ComInitDB(c, schema)
}

func (h *serialHandler) ComQuery(ctx context.Context, c *mysql.Conn, q string, cb mysql.ResultSpoolFn) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.Handler.ComQuery(ctx, c, q, cb)
}

func (h *serialHandler) ComMultiQuery(ctx context.Context, c *mysql.Conn, q string, cb mysql.ResultSpoolFn) (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.Handler.ComMultiQuery(ctx, c, q, cb)
}

func (h *serialHandler) ComPrepare(ctx context.Context, c *mysql.Conn, q string, p *mysql.PrepareData) ([]*querypb.Field, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.Handler.ComPrepare(ctx, c, q, p)
}

func (h *serialHandler) ComStmtExecute(ctx context.Context, c *mysql.Conn, p *mysql.PrepareData, cb func(*sqltypes.Result) error) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.Handler.ComStmtExecute(ctx, c, p, cb)
}

func (h *serialHandler) ComResetConnection(c *mysql.Conn) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.Handler.ComResetConnection(c)
}
