package prepare

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/retrace-dev/retrace/replayer/load"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var at = time.Date(2026, 11, 29, 10, 15, 23, 0, time.UTC)

func TestPrepare(t *testing.T) {
	get := &load.Request{At: at, ID: "t1", Method: "GET", URL: "/v1/accounts/42/summary?from=2026-01-01&kind=it's",
		Header: http.Header{"Accept": {"*/*"}, "Cookie": {"s=1"}}}
	post := &load.Request{At: at, ID: "t2", Method: "POST", URL: "/v1/query", Body: []byte(`{"account":7,"metric":"views"}`)}
	cases := []struct {
		name string
		cfg  Config
		in   *load.Request
		want *load.Request // nil: dropped
		err  string
	}{
		{name: "as is", in: get, want: get},
		{name: "v1 to sql",
			cfg: Config{Template: `SELECT * FROM summary WHERE account = {{.Segment 2 | sqlnum}} AND day >= {{.Param "from" | sqlstr}} AND kind = {{.Param "kind" | sqlstr}}`},
			in:  get,
			want: &load.Request{At: at, ID: "t1", API: "GET /v1/accounts/{id}/summary", Kind: "sql",
				Query: `SELECT * FROM summary WHERE account = 42 AND day >= '2026-01-01' AND kind = 'it\'s'`}},
		{name: "json body to sql",
			cfg: Config{Template: `{{with .JSON}}SELECT {{.metric | sqlident}} FROM stats WHERE account = {{.account | sqlnum}}{{end}}`},
			in:  post,
			want: &load.Request{At: at, ID: "t2", API: "POST /v1/query", Kind: "sql",
				Query: "SELECT `views` FROM stats WHERE account = 7"}},
		{name: "json overlay moves the path",
			cfg:  Config{Template: `{"url":{{printf "/v2%s" (.URL | replace "/v1" "") | json}},"header":{"X-Version":["2"]}}`},
			in:   get,
			want: &load.Request{At: at, ID: "t1", API: "GET /v1/accounts/{id}/summary", Kind: "http", Method: "GET", URL: "/v2/accounts/42/summary?from=2026-01-01&kind=it's", Header: http.Header{"X-Version": {"2"}}}},
		{name: "overlay sets query and args",
			cfg:  Config{Template: `{"query":"SELECT ?","args":[{{.Param "from" | json}}],"api":"q"}`},
			in:   get,
			want: &load.Request{At: at, ID: "t1", API: "q", Kind: "sql", Query: "SELECT ?", Args: []any{"2026-01-01"}}},
		{name: "drop", cfg: Config{Template: `{{if eq .Method "GET"}}{{else}}SELECT 1{{end}}`}, in: get},
		{name: "host and headers",
			cfg: Config{Host: "v2.internal", SetHeaders: http.Header{"x-env": {"perf"}}, DropHeaders: []string{"cookie"}},
			in:  get,
			want: &load.Request{At: at, ID: "t1", Method: "GET", URL: get.URL,
				Header: http.Header{"Accept": {"*/*"}, "Host": {"v2.internal"}, "X-Env": {"perf"}}}},
		{name: "injection refused", cfg: Config{Template: `SELECT {{.Param "kind" | sqlnum}}`}, in: get, err: "is not a number"},
		{name: "missing field", cfg: Config{Template: `{{.JSON.nope}}`}, in: post, err: "nope"},
		{name: "bad overlay", cfg: Config{Template: `{"url": }`}, in: get, err: "not a JSON object"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := New(c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			got, keep, err := p.Prepare(c.in)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.want == nil {
				if keep {
					t.Fatalf("kept %+v, want it dropped", got)
				}
				return
			}
			got.At = got.At.UTC()
			if !keep || !reflect.DeepEqual(got, c.want) {
				t.Errorf("got  %+v\nwant %+v", got, c.want)
			}
		})
	}
}

func TestBadTemplateIsRejected(t *testing.T) {
	if _, err := New(Config{Template: "{{.Nope", TemplateName: "v2.tmpl"}); err == nil || !strings.Contains(err.Error(), "v2.tmpl") {
		t.Errorf("error %v, want one naming v2.tmpl", err)
	}
}

func TestRunReportsLines(t *testing.T) {
	var in bytes.Buffer
	w := load.NewWriter(&in)
	for i, u := range []string{"/a?id=1", "/a?id=x", "/a?id=3"} {
		w.Write(&load.Request{At: at.Add(time.Duration(i) * time.Second), URL: u})
	}
	w.Flush()
	in.WriteString("not json\n")
	p, err := New(Config{Template: `SELECT * FROM a WHERE id = {{.Param "id" | sqlnum}}`})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	var bad []string
	st, err := Run(context.Background(), p, load.NewReader(&in, "in.jsonl"), load.NewWriter(&out), func(e error) { bad = append(bad, e.Error()) })
	if err != nil {
		t.Fatal(err)
	}
	if st.Read != 3 || st.Written != 2 || st.Failed != 1 || st.Bad != 1 {
		t.Errorf("stats %+v", st)
	}
	if len(bad) != 2 || !strings.HasPrefix(bad[0], "line 2: ") || !strings.HasPrefix(bad[1], "in.jsonl:4: ") {
		t.Errorf("reported %q", bad)
	}
	rd := load.NewReader(&out, "out")
	var queries []string
	for {
		var r load.Request
		if err := rd.Next(&r); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		queries = append(queries, fmt.Sprintf("%s|%s", r.API, r.Query))
	}
	if want := []string{"GET /a|SELECT * FROM a WHERE id = 1", "GET /a|SELECT * FROM a WHERE id = 3"}; !reflect.DeepEqual(queries, want) {
		t.Errorf("prepared %q, want %q", queries, want)
	}
}

func TestSQLString(t *testing.T) {
	for in, want := range map[string]string{`a`: `'a'`, `it's`: `'it\'s'`, `back\slash`: `'back\\slash'`, "nl\n\x00": `'nl\n\0'`} {
		if got := sqlString(in); got != want {
			t.Errorf("sqlstr(%q) = %s, want %s", in, got, want)
		}
	}
}
