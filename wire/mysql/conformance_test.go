package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/retrace-dev/retrace/internal/testenv"
	"github.com/retrace-dev/retrace/wire/mysql"
	"github.com/retrace-dev/retrace/wire/wiretest"
)

// pkt frames payload p with sequence id seq.
func pkt(seq byte, p string) []byte { return packet(seq, []byte(p)) }

func cat(bs ...[]byte) []byte {
	var out []byte
	for _, b := range bs {
		out = append(out, b...)
	}
	return out
}

var (
	okPacket  = "\x00\x00\x00\x02\x00\x00\x00"
	handshake = "\x0d\xa2\x0a\x00\x00\x00\x00\x01\x2d" + string(make([]byte, 23)) + "user\x00\x00db\x00mysql_native_password\x00"
	prepareOK = "\x00\x01\x00\x00\x00\x01\x00\x01\x00\x00\x00\x00" // statement 1, one column, one parameter
	// EXECUTE statement 1, no flags, one iteration, NULL bitmap 0, types
	// bound: LONGLONG 42
	execute = "\x17\x01\x00\x00\x00\x00\x01\x00\x00\x00\x00\x01\x08\x00" + "\x2a\x00\x00\x00\x00\x00\x00\x00"
)

var samples = []wiretest.Sample{{
	Name: "session",
	Exchanges: []wiretest.Exchange{
		{Response: mysql.DefaultGreeting(9), Setup: true},
		{Request: pkt(1, handshake), Response: pkt(2, okPacket), Setup: true},
		{Request: pkt(0, "\x03SET NAMES utf8mb4"), Response: pkt(1, okPacket), Setup: true},
		{Request: pkt(0, "\x03SELECT v FROM t WHERE id = 7"), Response: cat(pkt(1, "\x01"),
			pkt(2, "\x03def\x00\x01t\x01t\x01v\x01v\x0c\x2d\x00\x40\x00\x00\x00\xfd\x00\x00\x00\x00\x00"),
			pkt(3, "\x04row7"), pkt(4, "\xfe\x00\x00\x02\x00"))},
		{Request: pkt(0, "\x16SELECT v FROM t WHERE id = ?"), Response: cat(pkt(1, prepareOK),
			pkt(2, "\x03def\x00\x00\x00\x01?\x00\x0c\x3f\x00\x00\x00\x00\x00\x08\x80\x00\x00\x00\x00"))},
		{Request: pkt(0, execute), Response: pkt(1, okPacket)},
		{Request: pkt(0, "\x03INSERT INTO t VALUES (1, 'x')"), Response: pkt(1, okPacket)},
	},
}}

func TestConformance(t *testing.T) { wiretest.Conform(t, mysql.Protocol, samples...) }

func FuzzFramers(f *testing.F) { wiretest.FuzzFramers(f, mysql.Protocol, samples...) }

// sqlClient is a wiretest.Client over database/sql and go-sql-driver:
// text and prepared queries on a pool.
type sqlClient struct{ db *sql.DB }

func (c sqlClient) Call(ctx context.Context, i, n int) (string, error) {
	var v string
	var err error
	switch n {
	case 0:
		err = c.db.QueryRowContext(ctx, fmt.Sprintf("SELECT CONCAT('text-', %d, '-', CONNECTION_ID() > 0)", i)).Scan(&v)
	case 1:
		err = c.db.QueryRowContext(ctx, "SELECT CONCAT('prepared-', ?)", i).Scan(&v)
	default:
		err = c.db.QueryRowContext(ctx, "SELECT CONCAT(?, '-', ?)", i, n).Scan(&v)
	}
	return v, err
}

func (c sqlClient) Close() { c.db.Close() }

var netSeq int

func TestRecordReplay(t *testing.T) {
	cfg, err := gomysql.ParseDSN(testenv.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	relay := wiretest.NewRelay(t, cfg.Addr)
	wiretest.RecordReplay(t, wiretest.Scenario{Proto: mysql.Name, Dst: relay.Addr(), Stop: relay.Close,
		NewClient: func(dst string) wiretest.Client {
			c := cfg.Clone()
			c.Addr, c.TLSConfig = dst, "false"
			netSeq++
			c.Net = fmt.Sprintf("wiretest-%d", netSeq)
			gomysql.RegisterDialContext(c.Net, func(ctx context.Context, addr string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "tcp", addr)
			})
			db, err := sql.Open("mysql", c.FormatDSN())
			if err != nil {
				t.Fatal(err)
			}
			db.SetMaxOpenConns(4)
			db.SetMaxIdleConns(4)
			return sqlClient{db}
		}})
}
