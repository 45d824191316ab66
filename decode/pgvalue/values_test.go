package pgvalue_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"strings"
	"testing"

	"github.com/pgfeldera/pgfeldera/decode/pgvalue"
	"github.com/pgfeldera/pgfeldera/feldera"
)

func ct(t string) feldera.ColumnType { return feldera.ColumnType{Type: t, Nullable: true} }

func arr(t string) feldera.ColumnType {
	c := ct(t)
	return feldera.ColumnType{Type: "ARRAY", Nullable: true, Component: &c}
}

func TestEncoders(t *testing.T) {
	cases := []struct {
		oid  uint32
		ft   feldera.ColumnType
		in   string
		want string
	}{
		{pgvalue.OIDBool, ct("BOOLEAN"), "t", "true"},
		{pgvalue.OIDBool, ct("BOOLEAN"), "f", "false"},
		{pgvalue.OIDInt2, ct("SMALLINT"), "-32768", "-32768"},
		{pgvalue.OIDInt4, ct("INTEGER"), "42", "42"},
		{pgvalue.OIDInt8, ct("BIGINT"), "9223372036854775807", "9223372036854775807"},
		{pgvalue.OIDOID, ct("BIGINT"), "4294967295", "4294967295"},
		{pgvalue.OIDInt4, ct("DECIMAL"), "7", `"7"`},
		{pgvalue.OIDFloat8, ct("DOUBLE"), "1.5e+300", "1.5e+300"},
		{pgvalue.OIDNumeric, ct("DECIMAL"), "-12345678901234567890.000100", `"-12345678901234567890.000100"`},
		{pgvalue.OIDNumeric, ct("DOUBLE"), "1.25", "1.25"},
		{pgvalue.OIDText, ct("VARCHAR"), "a\"b\\c\nd\te\x01é😀", `"a\"b\\c\nd\te\u0001é😀"`},
		{pgvalue.OIDBpchar, ct("CHAR"), "ab  ", `"ab  "`},
		{pgvalue.OIDName, ct("VARCHAR"), "n", `"n"`},
		{pgvalue.OIDChar, ct("VARCHAR"), "c", `"c"`},
		{pgvalue.OIDUUID, ct("UUID"), "c32d330f-5757-4ada-bcf6-1fac2d54e37f", `"c32d330f-5757-4ada-bcf6-1fac2d54e37f"`},
		{pgvalue.OIDDate, ct("DATE"), "2024-02-29", `"2024-02-29"`},
		{pgvalue.OIDTime, ct("TIME"), "12:34:56.789", `"12:34:56.789"`},
		{pgvalue.OIDTimetz, ct("TIME"), "01:30:00+05:30", `"20:00:00"`},
		{pgvalue.OIDTimestamp, ct("TIMESTAMP"), "2024-01-01 12:00:00.5", `"2024-01-01T12:00:00.5"`},
		{pgvalue.OIDTimestamptz, ct("TIMESTAMP_TZ"), "2024-01-01 12:00:00+00", `"2024-01-01T12:00:00Z"`},
		{pgvalue.OIDTimestamptz, ct("TIMESTAMP"), "2024-01-01 07:00:00.123456-05", `"2024-01-01T07:00:00.123456-05:00"`},
		{pgvalue.OIDTimestamptz, ct("TIMESTAMP"), "2024-01-01 17:30:00+05:30", `"2024-01-01T17:30:00+05:30"`},
		{pgvalue.OIDJSONB, ct("VARIANT"), `{"a": [1, 2.5, null]}`, `{"a": [1, 2.5, null]}`},
		{pgvalue.OIDJSON, ct("VARCHAR"), `{"a":1}`, `"{\"a\":1}"`},
		{pgvalue.OIDBytea, ct("VARBINARY"), `\xdead00ff`, `[222,173,0,255]`},
		{pgvalue.OIDBytea, ct("BINARY"), `\x`, `[]`},
		{1007, arr("INTEGER"), "{1,NULL,-3}", "[1,null,-3]"},
		{1009, arr("VARCHAR"), `{a,"b c","d\"e","NULL",NULL}`, `["a","b c","d\"e","NULL",null]`},
		{1009, arr("VARCHAR"), `{}`, `[]`},
		{1001, arr("VARBINARY"), `{"\\x01ff"}`, `[[1,255]]`},
		{1185, arr("TIMESTAMP_TZ"), `{"2024-01-01 00:00:00+00"}`, `["2024-01-01T00:00:00Z"]`},
	}
	for _, c := range cases {
		enc, err := pgvalue.EncoderFor(c.oid, c.ft)
		if err != nil {
			t.Errorf("%s → %s: %v", pgvalue.TypeName(c.oid), c.ft.Type, err)
			continue
		}
		got, err := enc(nil, []byte(c.in))
		if err != nil || string(got) != c.want {
			t.Errorf("%s %q → %s: got %s, %v; want %s", pgvalue.TypeName(c.oid), c.in, c.ft.Type, got, err, c.want)
		}
	}
}

func TestEncoders_RefuseBadValues(t *testing.T) {
	cases := []struct {
		oid uint32
		ft  feldera.ColumnType
		in  string
	}{
		{pgvalue.OIDBytea, ct("VARBINARY"), `\336\255`}, // escape format
		{pgvalue.OIDBytea, ct("VARBINARY"), `\xzz`},
		{pgvalue.OIDDate, ct("DATE"), "0044-03-15 BC"},
		{pgvalue.OIDDate, ct("DATE"), "infinity"},
		{pgvalue.OIDTimestamp, ct("TIMESTAMP"), "infinity"},
		{pgvalue.OIDTimestamptz, ct("TIMESTAMP"), "2024-01-01 12:00:00"},
		{pgvalue.OIDTimestamptz, ct("TIMESTAMP"), "2024-01-01 12:00:00+05:53:28"},
		{1007, arr("INTEGER"), "{{1,2},{3,4}}"},
		{1007, arr("INTEGER"), "[0:1]={1,2}"},
		{pgvalue.OIDText, ct("VARCHAR"), "\xff\xfe"},
		{pgvalue.OIDJSONB, ct("VARIANT"), "{not json"},
		{pgvalue.OIDBool, ct("BOOLEAN"), "yes"},
	}
	for _, c := range cases {
		enc, err := pgvalue.EncoderFor(c.oid, c.ft)
		if err != nil {
			t.Fatalf("%s: %v", pgvalue.TypeName(c.oid), err)
		}
		if got, err := enc(nil, []byte(c.in)); err == nil {
			t.Errorf("%s %q: accepted as %s", pgvalue.TypeName(c.oid), c.in, got)
		}
	}
}

func TestEncoderFor_RefusesUnfaithfulPairs(t *testing.T) {
	for _, c := range []struct {
		oid uint32
		ft  string
	}{
		{pgvalue.OIDText, "INTEGER"}, {pgvalue.OIDTimestamptz, "DATE"}, {pgvalue.OIDInt8, "INTEGER"},
		{pgvalue.OIDFloat8, "REAL"}, {pgvalue.OIDBytea, "VARCHAR"}, {pgvalue.OIDJSONB, "INTEGER"}, {1007, "INTEGER"},
	} {
		if _, err := pgvalue.EncoderFor(c.oid, ct(c.ft)); err == nil {
			t.Errorf("%s → %s accepted", pgvalue.TypeName(c.oid), c.ft)
		}
	}
}

func FuzzEncoders(f *testing.F) {
	for _, s := range []string{"t", "123", "-1.5", "NaN", `\xdead`, "2024-01-01", "12:00:00+05:30",
		"2024-01-01 12:00:00.123+00", `{1,"a\"b",NULL}`, `{"a":1}`, "\xff", "{", "[1:2]={1}"} {
		for i := range oidsUnderTest {
			f.Add(i, s)
		}
	}
	f.Fuzz(func(t *testing.T, which int, in string) {
		if which < 0 {
			which = -which
		}
		c := oidsUnderTest[which%len(oidsUnderTest)]
		enc, err := pgvalue.EncoderFor(c.oid, c.ft)
		if err != nil {
			t.Fatal(err)
		}
		out, err := enc(nil, []byte(in))
		if err == nil && !jsonValid(out) {
			t.Fatalf("%s %q → invalid JSON %q", pgvalue.TypeName(c.oid), in, out)
		}
	})
}

var oidsUnderTest = []struct {
	oid uint32
	ft  feldera.ColumnType
}{
	{pgvalue.OIDBool, ct("BOOLEAN")}, {pgvalue.OIDInt8, ct("BIGINT")}, {pgvalue.OIDFloat8, ct("DOUBLE")},
	{pgvalue.OIDNumeric, ct("DECIMAL")}, {pgvalue.OIDNumeric, ct("DOUBLE")}, {pgvalue.OIDText, ct("VARCHAR")},
	{pgvalue.OIDDate, ct("DATE")}, {pgvalue.OIDTime, ct("TIME")}, {pgvalue.OIDTimetz, ct("TIME")},
	{pgvalue.OIDTimestamp, ct("TIMESTAMP")}, {pgvalue.OIDTimestamptz, ct("TIMESTAMP_TZ")},
	{pgvalue.OIDJSONB, ct("VARIANT")}, {pgvalue.OIDBytea, ct("VARBINARY")}, {1009, arr("VARCHAR")},
	{1007, arr("INTEGER")}, {1001, arr("VARBINARY")},
}

var _ = binary.BigEndian
var _ = strings.Contains

// A json value keeps the newlines it was written with (jsonb does not);
// inlined into a VARIANT it is still one line of NDJSON, which is what
// the replay's skip past the progress row counts, and the same value: an
// escaped newline inside a string stays one.
func TestJSONInlineIsOneLine(t *testing.T) {
	enc, err := pgvalue.EncoderFor(pgvalue.OIDJSON, ct("VARIANT"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := enc([]byte(`{"j":`), []byte("{\n  \"a\": \"x\\ny\",\r\n  \"b\": [1,\n2]\n}\n"))
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '}')
	var v struct {
		J struct {
			A string
			B []int
		}
	}
	if bytes.ContainsAny(got, "\r\n") || json.Unmarshal(got, &v) != nil || v.J.A != "x\ny" || len(v.J.B) != 2 {
		t.Fatalf("inlined json: %q (%+v), want one line with the same value", got, v)
	}
}
