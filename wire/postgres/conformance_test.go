package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/retrace-dev/retrace/internal/testenv"
	"github.com/retrace-dev/retrace/wire/postgres"
	"github.com/retrace-dev/retrace/wire/wiretest"
)

// samples is a pgx connection's life as PostgreSQL 15 answers it: TLS
// declined, SCRAM-SHA-256, a statement prepared by the statement cache
// and executed, a simple query, a COPY FROM STDIN, an error, Terminate.
var samples = func() []wiretest.Sample {
	prep, exec := prepareCall("stmtcache_1"), execCall("stmtcache_1", 42, "ann")
	return []wiretest.Sample{{
		Name: "pgx session",
		Exchanges: []wiretest.Exchange{
			{Request: request(postgres.SSLRequestCode), Response: []byte("N"), Setup: true},
			{Request: startup("user", "retrace", "database", "retrace_test"), Response: enc(&pgproto3.AuthenticationSASL{AuthMechanisms: []string{"SCRAM-SHA-256"}}), Setup: true},
			{Request: enc(&pgproto3.SASLInitialResponse{AuthMechanism: "SCRAM-SHA-256", Data: []byte("n,,n=,r=abc")}),
				Response: enc(&pgproto3.AuthenticationSASLContinue{Data: []byte("r=abcdef,s=c2FsdA==,i=4096")}), Setup: true},
			{Request: enc(&pgproto3.SASLResponse{Data: []byte("c=biws,r=abcdef,p=cHJvb2Y=")}),
				Response: enc(&pgproto3.AuthenticationSASLFinal{Data: []byte("v=c2ln")}, &pgproto3.AuthenticationOk{},
					&pgproto3.ParameterStatus{Name: "server_version", Value: "15.8"}, &pgproto3.ParameterStatus{Name: "client_encoding", Value: "UTF8"},
					&pgproto3.BackendKeyData{ProcessID: 4242, SecretKey: []byte{1, 2, 3, 4}}, &pgproto3.ReadyForQuery{TxStatus: 'I'}), Setup: true},
			{Request: enc(&pgproto3.Query{String: "-- ping"}), Response: enc(&pgproto3.EmptyQueryResponse{}, &pgproto3.ReadyForQuery{TxStatus: 'I'}), Setup: true},
			{Request: prep.Request, Response: prep.Response, Setup: true},
			{Request: exec.Request, Response: exec.Response},
			{Request: enc(&pgproto3.Query{String: "select count(*) from t where name = 'ann'"}),
				Response: enc(&pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{{Name: []byte("count"), DataTypeOID: 20, DataTypeSize: 8}}},
					&pgproto3.DataRow{Values: [][]byte{[]byte("1")}}, &pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")}, &pgproto3.ReadyForQuery{TxStatus: 'I'})},
			{Request: enc(&pgproto3.Query{String: "copy t (id, name) from stdin"}), Response: enc(&pgproto3.CopyInResponse{ColumnFormatCodes: []uint16{0, 0}})},
			{Request: enc(&pgproto3.CopyData{Data: []byte("7\tbob\n")}, &pgproto3.CopyDone{}),
				Response: enc(&pgproto3.CommandComplete{CommandTag: []byte("COPY 1")}, &pgproto3.ReadyForQuery{TxStatus: 'I'})},
			{Request: enc(&pgproto3.Parse{Query: "insert into t values ($1)"}, &pgproto3.Bind{Parameters: [][]byte{[]byte("7")}}, &pgproto3.Execute{}, &pgproto3.Sync{}),
				Response: enc(&pgproto3.ErrorResponse{Severity: "ERROR", Code: "23505", Message: "duplicate key"}, &pgproto3.ReadyForQuery{TxStatus: 'I'})},
			{Request: enc(&pgproto3.Terminate{}), Setup: true},
		},
	}}
}()

func TestConformance(t *testing.T) { wiretest.Conform(t, postgres.Protocol, samples...) }

func FuzzConformanceFramers(f *testing.F) { wiretest.FuzzFramers(f, postgres.Protocol, samples...) }

// pgxClient is a wiretest.Client over a pgx pool in its default query
// mode (statements prepared and cached per connection).
type pgxClient struct{ pool *pgxpool.Pool }

func (c pgxClient) Call(ctx context.Context, i, n int) (string, error) {
	var v string
	var err error
	switch n {
	case 0:
		err = c.pool.QueryRow(ctx, "SELECT 'prepared-' || $1::int", i).Scan(&v)
	case 1:
		err = c.pool.QueryRow(ctx, "SELECT $1::text || '-' || $2::int", fmt.Sprint(i), n).Scan(&v)
	default:
		err = c.pool.QueryRow(ctx, "SELECT "+fmt.Sprint(i*10+n)+"::text", pgx.QueryExecModeSimpleProtocol).Scan(&v)
	}
	return v, err
}

func (c pgxClient) Close() { c.pool.Close() }

// TestRecordReplay: the conformance kit's record and replay of concurrent
// traces on a pgx pool, with the test PostgreSQL (behind a relay) stopped
// for the replay.
func TestRecordReplay(t *testing.T) {
	url := testenv.PostgresURL(t)
	at := strings.Index(url, "@")
	rest := url[at+1:]
	slash := strings.IndexAny(rest, "/?")
	relay := wiretest.NewRelay(t, rest[:slash])
	wiretest.RecordReplay(t, wiretest.Scenario{Proto: postgres.Proto, Dst: relay.Addr(), Stop: relay.Close,
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
			return pgxClient{pool}
		}})
}
