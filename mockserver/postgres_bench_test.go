package mockserver_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/retrace-dev/retrace/mockserver"
	"github.com/retrace-dev/retrace/mockserver/mocktest"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/trace"
	"github.com/retrace-dev/retrace/wire/postgres"
)

func pgEncode(ms ...interface{ Encode([]byte) ([]byte, error) }) []byte {
	var b []byte
	for _, m := range ms {
		b, _ = m.Encode(b)
	}
	return b
}

const pgBenchSQL = "select name, balance from users where id = $1"

// pgBenchCall is connection i's recorded prepare (set-up, as pgx's
// statement cache sends it) and its query: a Bind of the statement with
// a binary id, Describe, Execute, Sync, answered with one row.
func pgBenchCall(i int) (prepReq, prepResp, req, resp []byte) {
	fields := []pgproto3.FieldDescription{{Name: []byte("name"), DataTypeOID: 25, DataTypeSize: -1}, {Name: []byte("balance"), DataTypeOID: 20, DataTypeSize: 8, Format: 1}}
	prepReq = pgEncode(&pgproto3.Parse{Name: "stmtcache_1", Query: pgBenchSQL}, &pgproto3.Describe{ObjectType: 'S', Name: "stmtcache_1"}, &pgproto3.Sync{})
	prepResp = pgEncode(&pgproto3.ParseComplete{}, &pgproto3.ParameterDescription{ParameterOIDs: []uint32{23}},
		&pgproto3.RowDescription{Fields: fields}, &pgproto3.ReadyForQuery{TxStatus: 'I'})
	req = pgEncode(&pgproto3.Bind{PreparedStatement: "stmtcache_1", ParameterFormatCodes: []int16{1}, Parameters: [][]byte{binary.BigEndian.AppendUint32(nil, uint32(i))},
		ResultFormatCodes: []int16{0, 1}}, &pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}, &pgproto3.Sync{})
	resp = pgEncode(&pgproto3.BindComplete{}, &pgproto3.RowDescription{Fields: fields},
		&pgproto3.DataRow{Values: [][]byte{[]byte(fmt.Sprintf("user %d", i)), binary.BigEndian.AppendUint64(nil, uint64(i*7))}},
		&pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")}, &pgproto3.ReadyForQuery{TxStatus: 'I'})
	return
}

// readUntilReady reads server messages up to a ReadyForQuery.
func readUntilReady(br *bufio.Reader) error {
	for {
		hdr := make([]byte, 5)
		if _, err := io.ReadFull(br, hdr); err != nil {
			return err
		}
		if _, err := br.Discard(int(binary.BigEndian.Uint32(hdr[1:])) - 4); err != nil {
			return err
		}
		if hdr[0] == postgres.ReadyForQuery {
			return nil
		}
	}
}

// BenchmarkPostgresMockVsPlain answers b.N PostgreSQL queries (a prepared
// statement bound and executed, one row back) over 64 connections, one
// trace each, from the mock server, and the same number from a plain Go
// server writing the same bytes, alternated in the same run. Each mock
// connection starts up and prepares before the clock starts.
func BenchmarkPostgresMockVsPlain(b *testing.B) {
	const dst = "10.0.0.8:5432"
	var sessions []*recording.Session
	var reqs, resps [][]byte
	for i := range benchConns {
		pq, pr, req, resp := pgBenchCall(i)
		reqs, resps = append(reqs, req), append(resps, resp)
		sessions = append(sessions, &recording.Session{V: 1, ID: fmt.Sprintf("pg-%d", i), Calls: []recording.Call{
			{Seq: 0, Proto: "postgres", Dst: dst, Setup: true, Conn: int64(i + 1), Request: pq, Response: pr},
			{Seq: 1, Proto: "postgres", Dst: dst, Conn: int64(i + 1), Request: req, Response: resp}}})
	}
	srv := mocktest.NewServer(b, mockserver.Config{Strategies: []mockserver.Strategy{"first"}, MaxObserved: 1000}, sessions...)
	paddr, stop := plainServer(b, reqs, resps)
	b.Cleanup(stop)
	dialPlain := func(int) net.Conn {
		c, err := net.Dial("tcp", paddr)
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	startup := pgEncode(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber, Parameters: map[string]string{"user": "u", "database": "d"}})
	dialMock := func(i int) net.Conn {
		d := &mocktest.Dialer{Mock: srv.Addr(), TID: fmt.Sprintf("pg-%d", i)}
		c, err := d.DialContext(context.Background(), "tcp", dst)
		if err != nil {
			b.Fatal(err)
		}
		br := bufio.NewReader(c)
		pq, _, _, _ := pgBenchCall(i)
		for _, m := range [][]byte{startup, pq} {
			if _, err := c.Write(m); err != nil {
				b.Fatal(err)
			}
			if err := readUntilReady(br); err != nil {
				b.Fatal(err)
			}
		}
		return c.(*mocktest.Conn).Conn // write pre-framed requests directly
	}
	plainReq := func(i int) []byte { return reqs[i] }
	mockReq := func(i int) []byte { return trace.AppendFrame(nil, fmt.Sprintf("pg-%d", i), dst, reqs[i]) }
	respLen := func(i int) int { return len(resps[i]) }
	const rounds = 4
	var plainT, mockT time.Duration
	plainH := hdrhistogram.New(1, int64(time.Second), 3)
	mockH := hdrhistogram.New(1, int64(time.Second), 3)
	b.ResetTimer()
	for range rounds {
		el, h := drive(b, benchConns, b.N/rounds+1, dialPlain, plainReq, respLen)
		plainT += el
		plainH.Merge(h)
		el, h = drive(b, benchConns, b.N/rounds+1, dialMock, mockReq, respLen)
		mockT += el
		mockH.Merge(h)
	}
	plainRate := float64(rounds*(b.N/rounds+1)) / plainT.Seconds()
	mockRate := float64(rounds*(b.N/rounds+1)) / mockT.Seconds()
	b.StopTimer()
	// the mock's answers were the recorded ones (a missing mock's error
	// would have another length and stall the exchange, but check)
	resp, err := http.Get(srv.AdminURL() + "/missing")
	if err != nil {
		b.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(bytes.TrimSpace(body)) != "[]" {
		b.Fatalf("missing mocks: %.300s", body)
	}
	b.ReportMetric(plainRate, "plain-req/s")
	b.ReportMetric(mockRate, "mock-req/s")
	b.ReportMetric(mockRate/plainRate, "mock/plain")
	b.ReportMetric(float64(plainH.ValueAtQuantile(99))/1e3, "plain-p99-µs")
	b.ReportMetric(float64(mockH.ValueAtQuantile(99))/1e3, "mock-p99-µs")
}
