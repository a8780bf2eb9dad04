package demo

import (
	"fmt"
	"net"

	sqle "github.com/dolthub/go-mysql-server"
	"github.com/dolthub/go-mysql-server/memory"
	"github.com/dolthub/go-mysql-server/server"
	"github.com/dolthub/go-mysql-server/sql"
)

// MySQL is an in-memory MySQL-compatible server (dolthub/go-mysql-server)
// on a loopback port: the demo's stand-in for a real database.
type MySQL struct {
	srv  *server.Server
	addr string
	db   string
	done chan error
}

// StartMySQL starts an in-memory MySQL server with one empty database named
// dbName on addr ("127.0.0.1:0" picks a free port). It accepts user root
// without a password.
func StartMySQL(addr, dbName string) (*MySQL, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("demo: embedded MySQL: listen on %s: %w", addr, err)
	}
	db := memory.NewDatabase(dbName)
	db.BaseDatabase.EnablePrimaryKeyIndexes()
	pro := memory.NewDBProvider(db)
	engine := sqle.NewDefault(pro)
	cfg := server.Config{Protocol: "tcp", Address: ln.Addr().String(), Listener: ln}
	srv, err := server.NewServer(cfg, engine, sql.NewContext, memory.NewSessionBuilder(pro), nil)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("demo: embedded MySQL on %s: %w", ln.Addr(), err)
	}
	m := &MySQL{srv: srv, addr: ln.Addr().String(), db: dbName, done: make(chan error, 1)}
	go func() { m.done <- srv.Start() }()
	return m, nil
}

// Addr is the host:port the server listens on.
func (m *MySQL) Addr() string { return m.addr }

// DSN is a go-sql-driver/mysql DSN of the server's database.
func (m *MySQL) DSN() string {
	return fmt.Sprintf("root@tcp(%s)/%s?parseTime=true", m.addr, m.db)
}

// Close stops the server and waits for it.
func (m *MySQL) Close() error {
	err := m.srv.Close()
	<-m.done
	return err
}
