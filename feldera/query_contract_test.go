package feldera_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
)

// /query?format=json prints rows as arrow_json's line-delimited writer
// does (crates/adapters/src/adhoc/executor.rs, stream_json_query), which
// is not what ingress takes: BINARY as hex, VARIANT as a string of JSON,
// DECIMAL as a bare number at its scale, TIMESTAMP with a T and a 3- or
// 6-digit fraction, TIME with 3, 6 or 9, floats with a ".0", explicit
// nulls.
func TestQuery_PrintsArrowJSON(t *testing.T) {
	_, c := newServer(t, nil)
	push(t, c, "typed", `{"insert":{"id":1,"d":"123.4","b":[222,173],"ts":"2024-01-01 12:00:00.5+05:30","f":3,"ok":true,"dt":"2024-02-29","tm":"12:34:56.7891","u":"C32D330F-5757-4ADA-BCF6-1FAC2D54E37F","j":{"b":1,"a":[true,null]},"arr":[1,null,3]}}
{"insert":{"id":2,"f":1e10,"ts":"2024-01-01T00:00:00Z"}}`)
	var got []string
	if err := c.Query(ctx(t), "SELECT * FROM typed ORDER BY id", func(r json.RawMessage) error {
		got = append(got, string(r))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`{"id":1,"d":123.40,"b":"dead","ts":"2024-01-01T06:30:00.500","f":3.0,"ok":true,"dt":"2024-02-29","tm":"12:34:56.789100","u":"c32d330f-5757-4ada-bcf6-1fac2d54e37f","j":"{\"a\":[true,null],\"b\":1}","arr":[1,null,3]}`,
		`{"id":2,"d":null,"b":null,"ts":"2024-01-01T00:00:00","f":1.0e10,"ok":null,"dt":null,"tm":null,"u":null,"j":null,"arr":null}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("query:\n got %s\nwant %s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// What /query printed, converted by IngressValue, is what ingress takes
// and means the same row: a keyless table's rows read back and sent as
// deletes empty it, for every type (a delete that does not match exactly
// would leave the row: the double's multiset counts it).
func TestQuery_RowsGoBackAsDeletes(t *testing.T) {
	const typed = `CREATE TABLE t (d DECIMAL(5,2), b VARBINARY, ts TIMESTAMP, f DOUBLE, r REAL, ok BOOLEAN, dt DATE, tm TIME, u UUID, j VARIANT, arr INT ARRAY, barr VARBINARY ARRAY, s VARCHAR, ch CHAR(3)) WITH ('materialized' = 'true');`
	s, err := felderatest.NewServer(felderatest.Config{Pipeline: "p1", Tables: felderatest.MustParseDDL(typed)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	c, err := feldera.New(feldera.Config{URL: s.URL, Pipeline: "p1"})
	if err != nil {
		t.Fatal(err)
	}
	push(t, c, "t", `{"insert":{"d":"1.5","b":[0,255],"ts":"2024-01-01 12:00:00.123456","f":0.1,"r":1.5,"ok":false,"dt":"0001-01-01","tm":"23:59:59.999999999","u":"c32d330f-5757-4ada-bcf6-1fac2d54e37f","j":"text","arr":[],"barr":[[1,2],null],"s":"<a & b>\u2028","ch":"ab"}}
{"insert":{"j":{"k":[1.5,{"x":null}]},"f":1e-7,"d":"-0.05"}}
{"insert":{}}`)
	var rows []json.RawMessage
	if err := c.Query(ctx(t), "SELECT * FROM t", func(r json.RawMessage) error {
		rows = append(rows, append(json.RawMessage(nil), r...))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	rel := felderatest.MustParseDDL(typed)[0]
	var body strings.Builder
	for _, r := range rows {
		del, err := rel.IngressRow(r)
		if err != nil {
			t.Fatalf("%s: %v", r, err)
		}
		body.WriteString(`{"delete":` + string(del) + "}\n")
	}
	push(t, c, "t", body.String())
	if n := s.Len("t"); n != 0 || s.MissedDeletes() != 0 {
		t.Fatalf("after deleting every row read back: %d rows left, %d deletes missed", n, s.MissedDeletes())
	}
}

func TestQueryText(t *testing.T) {
	ct := func(typ string) feldera.ColumnType { return feldera.ColumnType{Type: typ} }
	for _, tc := range []struct {
		ct   feldera.ColumnType
		in   string
		want string
	}{
		{ct("BIGINT"), `42`, `42`},
		{ct("VARCHAR"), `"a\"b"`, `a"b`},
		{ct("VARBINARY"), `"dead"`, `\xdead`},
		{ct("BINARY"), `[222,173]`, `\xdead`},
		{ct("DECIMAL"), `12.30`, `12.30`},
		{ct("TIMESTAMP"), `"2024-01-01T00:00:00.500"`, `2024-01-01T00:00:00.500`},
		{ct("BOOLEAN"), `true`, `true`},
	} {
		got, err := feldera.QueryText(tc.ct, json.RawMessage(tc.in))
		if err != nil || got != tc.want {
			t.Errorf("QueryText(%s, %s) = %q, %v; want %q", tc.ct.Type, tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []struct{ typ, in string }{{"BIGINT", `null`}, {"VARIANT", `"1"`}, {"ARRAY", `[1]`}, {"VARBINARY", `"zz"`}} {
		if got, err := feldera.QueryText(ct(bad.typ), json.RawMessage(bad.in)); err == nil {
			t.Errorf("QueryText(%s, %s) = %q, want an error", bad.typ, bad.in, got)
		}
	}
}
