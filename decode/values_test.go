package decode_test

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/pgfeldera/pgfeldera/decode"
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
		{decode.OIDBool, ct("BOOLEAN"), "t", "true"},
		{decode.OIDBool, ct("BOOLEAN"), "f", "false"},
		{decode.OIDInt2, ct("SMALLINT"), "-32768", "-32768"},
		{decode.OIDInt4, ct("INTEGER"), "42", "42"},
		{decode.OIDInt8, ct("BIGINT"), "9223372036854775807", "9223372036854775807"},
		{decode.OIDOID, ct("BIGINT"), "4294967295", "4294967295"},
		{decode.OIDInt4, ct("DECIMAL"), "7", `"7"`},
		{decode.OIDFloat8, ct("DOUBLE"), "1.5e+300", "1.5e+300"},
		{decode.OIDNumeric, ct("DECIMAL"), "-12345678901234567890.000100", `"-12345678901234567890.000100"`},
		{decode.OIDNumeric, ct("DOUBLE"), "1.25", "1.25"},
		{decode.OIDText, ct("VARCHAR"), "a\"b\\c\nd\te\x01é😀", `"a\"b\\c\nd\te\u0001é😀"`},
		{decode.OIDBpchar, ct("CHAR"), "ab  ", `"ab  "`},
		{decode.OIDName, ct("VARCHAR"), "n", `"n"`},
		{decode.OIDChar, ct("VARCHAR"), "c", `"c"`},
		{decode.OIDUUID, ct("UUID"), "c32d330f-5757-4ada-bcf6-1fac2d54e37f", `"c32d330f-5757-4ada-bcf6-1fac2d54e37f"`},
		{decode.OIDDate, ct("DATE"), "2024-02-29", `"2024-02-29"`},
		{decode.OIDTime, ct("TIME"), "12:34:56.789", `"12:34:56.789"`},
		{decode.OIDTimetz, ct("TIME"), "01:30:00+05:30", `"20:00:00"`},
		{decode.OIDTimestamp, ct("TIMESTAMP"), "2024-01-01 12:00:00.5", `"2024-01-01T12:00:00.5"`},
		{decode.OIDTimestamptz, ct("TIMESTAMP_TZ"), "2024-01-01 12:00:00+00", `"2024-01-01T12:00:00Z"`},
		{decode.OIDTimestamptz, ct("TIMESTAMP"), "2024-01-01 07:00:00.123456-05", `"2024-01-01T07:00:00.123456-05:00"`},
		{decode.OIDTimestamptz, ct("TIMESTAMP"), "2024-01-01 17:30:00+05:30", `"2024-01-01T17:30:00+05:30"`},
		{decode.OIDJSONB, ct("VARIANT"), `{"a": [1, 2.5, null]}`, `{"a": [1, 2.5, null]}`},
		{decode.OIDJSON, ct("VARCHAR"), `{"a":1}`, `"{\"a\":1}"`},
		{decode.OIDBytea, ct("VARBINARY"), `\xdead00ff`, `[222,173,0,255]`},
		{decode.OIDBytea, ct("BINARY"), `\x`, `[]`},
		{1007, arr("INTEGER"), "{1,NULL,-3}", "[1,null,-3]"},
		{1009, arr("VARCHAR"), `{a,"b c","d\"e","NULL",NULL}`, `["a","b c","d\"e","NULL",null]`},
		{1009, arr("VARCHAR"), `{}`, `[]`},
		{1001, arr("VARBINARY"), `{"\\x01ff"}`, `[[1,255]]`},
		{1185, arr("TIMESTAMP_TZ"), `{"2024-01-01 00:00:00+00"}`, `["2024-01-01T00:00:00Z"]`},
	}
	for _, c := range cases {
		enc, err := decode.EncoderFor(c.oid, c.ft)
		if err != nil {
			t.Errorf("%s → %s: %v", decode.TypeName(c.oid), c.ft.Type, err)
			continue
		}
		got, err := enc(nil, []byte(c.in))
		if err != nil || string(got) != c.want {
			t.Errorf("%s %q → %s: got %s, %v; want %s", decode.TypeName(c.oid), c.in, c.ft.Type, got, err, c.want)
		}
	}
}

func TestEncoders_RefuseBadValues(t *testing.T) {
	cases := []struct {
		oid uint32
		ft  feldera.ColumnType
		in  string
	}{
		{decode.OIDBytea, ct("VARBINARY"), `\336\255`}, // escape format
		{decode.OIDBytea, ct("VARBINARY"), `\xzz`},
		{decode.OIDDate, ct("DATE"), "0044-03-15 BC"},
		{decode.OIDDate, ct("DATE"), "infinity"},
		{decode.OIDTimestamp, ct("TIMESTAMP"), "infinity"},
		{decode.OIDTimestamptz, ct("TIMESTAMP"), "2024-01-01 12:00:00"},
		{decode.OIDTimestamptz, ct("TIMESTAMP"), "2024-01-01 12:00:00+05:53:28"},
		{1007, arr("INTEGER"), "{{1,2},{3,4}}"},
		{1007, arr("INTEGER"), "[0:1]={1,2}"},
		{decode.OIDText, ct("VARCHAR"), "\xff\xfe"},
		{decode.OIDJSONB, ct("VARIANT"), "{not json"},
		{decode.OIDBool, ct("BOOLEAN"), "yes"},
	}
	for _, c := range cases {
		enc, err := decode.EncoderFor(c.oid, c.ft)
		if err != nil {
			t.Fatalf("%s: %v", decode.TypeName(c.oid), err)
		}
		if got, err := enc(nil, []byte(c.in)); err == nil {
			t.Errorf("%s %q: accepted as %s", decode.TypeName(c.oid), c.in, got)
		}
	}
}

func TestEncoderFor_RefusesUnfaithfulPairs(t *testing.T) {
	for _, c := range []struct {
		oid uint32
		ft  string
	}{
		{decode.OIDText, "INTEGER"}, {decode.OIDTimestamptz, "DATE"}, {decode.OIDInt8, "INTEGER"},
		{decode.OIDFloat8, "REAL"}, {decode.OIDBytea, "VARCHAR"}, {decode.OIDJSONB, "INTEGER"}, {1007, "INTEGER"},
	} {
		if _, err := decode.EncoderFor(c.oid, ct(c.ft)); err == nil {
			t.Errorf("%s → %s accepted", decode.TypeName(c.oid), c.ft)
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
		enc, err := decode.EncoderFor(c.oid, c.ft)
		if err != nil {
			t.Fatal(err)
		}
		out, err := enc(nil, []byte(in))
		if err == nil && !jsonValid(out) {
			t.Fatalf("%s %q → invalid JSON %q", decode.TypeName(c.oid), in, out)
		}
	})
}

var oidsUnderTest = []struct {
	oid uint32
	ft  feldera.ColumnType
}{
	{decode.OIDBool, ct("BOOLEAN")}, {decode.OIDInt8, ct("BIGINT")}, {decode.OIDFloat8, ct("DOUBLE")},
	{decode.OIDNumeric, ct("DECIMAL")}, {decode.OIDNumeric, ct("DOUBLE")}, {decode.OIDText, ct("VARCHAR")},
	{decode.OIDDate, ct("DATE")}, {decode.OIDTime, ct("TIME")}, {decode.OIDTimetz, ct("TIME")},
	{decode.OIDTimestamp, ct("TIMESTAMP")}, {decode.OIDTimestamptz, ct("TIMESTAMP_TZ")},
	{decode.OIDJSONB, ct("VARIANT")}, {decode.OIDBytea, ct("VARBINARY")}, {1009, arr("VARCHAR")},
	{1007, arr("INTEGER")}, {1001, arr("VARBINARY")},
}

var _ = binary.BigEndian
var _ = strings.Contains
