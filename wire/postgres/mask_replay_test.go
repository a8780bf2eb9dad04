package postgres_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/retrace-dev/retrace/internal/testenv"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/wire/postgres"
	"github.com/retrace-dev/retrace/wire/wiretest"
)

var cardRule = regexp.MustCompile(`\b(?:\d[\s-]?){12,18}\d\b`)

// pgxCards sends card numbers as bound parameters (text, extended
// protocol), as literals (simple protocol) and next to binary numbers.
type pgxCards struct{ pool *pgxpool.Pool }

func (c pgxCards) Call(ctx context.Context, i, n int) (string, error) {
	card := fmt.Sprintf("card 4111111111111111 #%d", i)
	var v string
	var err error
	switch n {
	case 0:
		err = c.pool.QueryRow(ctx, "SELECT $1::text || ' ok'", card).Scan(&v)
	case 1:
		err = c.pool.QueryRow(ctx, "SELECT '"+card+"'::text", pgx.QueryExecModeSimpleProtocol).Scan(&v)
	default:
		var x int64
		err = c.pool.QueryRow(ctx, "SELECT $1::int8 * 2, $2::text", int64(i), card).Scan(&x, &v)
		v = fmt.Sprint(x, " ", v)
	}
	return v, err
}

func (c pgxCards) Close() { c.pool.Close() }

// A recording masked by a regex rule that changes the length of values in
// Bind parameters, Query literals and DataRow values replays: pgx reads
// every masked message and gets the masked values.
func TestMaskedRecordReplay(t *testing.T) {
	url := testenv.PostgresURL(t)
	at := strings.Index(url, "@")
	rest := url[at+1:]
	slash := strings.IndexAny(rest, "/?")
	relay := wiretest.NewRelay(t, rest[:slash])
	mask, err := recording.ParseMasker(strings.NewReader(`regex \b(?:\d[\s-]?){12,18}\d\b [card]`+"\n"), "rules")
	if err != nil {
		t.Fatal(err)
	}
	wiretest.RecordReplay(t, wiretest.Scenario{Proto: postgres.Proto, Dst: relay.Addr(), Stop: relay.Close,
		Mask: mask, Masked: func(s string) string { return cardRule.ReplaceAllString(s, "[card]") },
		NewClient: func(dst string) wiretest.Client {
			cfg, err := pgxpool.ParseConfig(url[:at+1] + dst + rest[slash:])
			if err != nil {
				t.Fatal(err)
			}
			cfg.MaxConns = 4
			pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			return pgxCards{pool}
		}})
}
