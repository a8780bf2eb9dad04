package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"regexp"
	"strings"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/retrace-dev/retrace/internal/testenv"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/wire/mysql"
	"github.com/retrace-dev/retrace/wire/wiretest"
)

var cardRule = regexp.MustCompile(`\b(?:\d[\s-]?){12,18}\d\b`)

// sqlCards sends card numbers as literals (text protocol, text rows), as
// prepared statements' parameters (binary rows) and next to numbers.
type sqlCards struct{ db *sql.DB }

func (c sqlCards) Call(ctx context.Context, i, n int) (string, error) {
	card := fmt.Sprintf("card 4111111111111111 #%d", i)
	var v string
	var err error
	switch n {
	case 0:
		err = c.db.QueryRowContext(ctx, "SELECT CONCAT('"+card+"', ' ', 1)").Scan(&v)
	case 1:
		err = c.db.QueryRowContext(ctx, "SELECT CONCAT(?, ' ok')", card).Scan(&v)
	default:
		var x int64
		err = c.db.QueryRowContext(ctx, "SELECT ? * 2, ?", int64(i), card).Scan(&x, &v)
		v = fmt.Sprint(x, " ", v)
	}
	return v, err
}

func (c sqlCards) Close() { c.db.Close() }

// A recording masked by a regex rule that changes the length of values in
// statement literals, execute parameters and text and binary rows
// replays: the driver reads every masked packet and gets the masked
// values.
func TestMaskedRecordReplay(t *testing.T) {
	cfg, err := gomysql.ParseDSN(testenv.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	relay := wiretest.NewRelay(t, cfg.Addr)
	mask, err := recording.ParseMasker(strings.NewReader(`regex \b(?:\d[\s-]?){12,18}\d\b [card]`+"\n"), "rules")
	if err != nil {
		t.Fatal(err)
	}
	wiretest.RecordReplay(t, wiretest.Scenario{Proto: mysql.Name, Dst: relay.Addr(), Stop: relay.Close,
		Mask: mask, Masked: func(s string) string { return cardRule.ReplaceAllString(s, "[card]") },
		NewClient: func(dst string) wiretest.Client {
			c := cfg.Clone()
			c.Addr, c.TLSConfig = dst, "false"
			netSeq++
			c.Net = fmt.Sprintf("wiretest-mask-%d", netSeq)
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
			return sqlCards{db}
		}})
}
