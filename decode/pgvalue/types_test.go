package pgvalue_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/pgfeldera/pgfeldera/decode/pgvalue"
	"github.com/pgfeldera/pgfeldera/feldera"
)

// catalog is a pg_type for tests: an enum, domains (over numeric(10,2),
// over int4, over the first domain, over money), citext, a user range and
// multirange, a composite, and arrays of the enum and citext.
var catalog = map[uint32]pgvalue.PGType{
	16500: {OID: 16500, Name: "mood", TypName: "mood", Kind: 'e', Category: 'E'},
	16501: {OID: 16501, Name: "mood[]", TypName: "_mood", Kind: 'b', Category: 'A', Elem: 16500},
	16510: {OID: 16510, Name: "price", TypName: "price", Kind: 'd', Category: 'N', Base: pgvalue.OIDNumeric, BaseMod: (10<<16 | 2) + 4},
	16511: {OID: 16511, Name: "posint", TypName: "posint", Kind: 'd', Category: 'N', Base: pgvalue.OIDInt4, BaseMod: -1},
	16512: {OID: 16512, Name: "cheap", TypName: "cheap", Kind: 'd', Category: 'N', Base: 16510, BaseMod: -1},
	16513: {OID: 16513, Name: "cash", TypName: "cash", Kind: 'd', Category: 'N', Base: pgvalue.OIDMoney, BaseMod: -1},
	16520: {OID: 16520, Name: "citext", TypName: "citext", Kind: 'b', Category: 'S'},
	16521: {OID: 16521, Name: "citext[]", TypName: "_citext", Kind: 'b', Category: 'A', Elem: 16520},
	16530: {OID: 16530, Name: "floatrange", TypName: "floatrange", Kind: 'r', Category: 'R'},
	16531: {OID: 16531, Name: "floatmultirange", TypName: "floatmultirange", Kind: 'm', Category: 'R'},
	16540: {OID: 16540, Name: "point3", TypName: "point3", Kind: 'c', Category: 'C'},
	16550: {OID: 16550, Name: "hstore", TypName: "hstore", Kind: 'b', Category: 'U'},
}

func types(oid uint32) (pgvalue.PGType, bool) { t, ok := catalog[oid]; return t, ok }

func dec(p, s int) feldera.ColumnType {
	return feldera.ColumnType{Type: "DECIMAL", Nullable: true, Precision: &p, Scale: &s}
}

func nested(ft feldera.ColumnType, dims int) feldera.ColumnType {
	for range dims {
		c := ft
		ft = feldera.ColumnType{Type: "ARRAY", Nullable: true, Component: &c}
	}
	return ft
}

func numTypmod(p, s int) int32 { return int32(p<<16|s) + 4 }

func TestPlan_Types(t *testing.T) {
	cases := []struct {
		name   string
		oid    uint32
		typmod int32
		ft     feldera.ColumnType
		in     string
		want   string
	}{
		{"enum", 16500, -1, ct("VARCHAR"), "happy", `"happy"`},
		{"enumChar", 16500, -1, ct("CHAR"), "ok", `"ok"`},
		{"enumArray", 16501, -1, arr("VARCHAR"), "{sad,NULL,ok}", `["sad",null,"ok"]`},
		{"domainNumeric", 16510, -1, dec(10, 2), "12.50", `"12.50"`},
		{"domainInt", 16511, -1, ct("INTEGER"), "7", "7"},
		{"domainOverDomain", 16512, -1, dec(12, 2), "1.25", `"1.25"`},
		{"citext", 16520, -1, ct("VARCHAR"), "MiXeD", `"MiXeD"`},
		{"citextArray", 16521, -1, arr("VARCHAR"), `{a,"B c"}`, `["a","B c"]`},
		{"inet", pgvalue.OIDInet, -1, ct("VARCHAR"), "192.168.0.1/24", `"192.168.0.1/24"`},
		{"cidr", pgvalue.OIDCidr, -1, ct("VARCHAR"), "10.0.0.0/8", `"10.0.0.0/8"`},
		{"inetArray", 1041, -1, arr("VARCHAR"), "{::1,10.0.0.1}", `["::1","10.0.0.1"]`},
		{"macaddr", pgvalue.OIDMacaddr, -1, ct("VARCHAR"), "08:00:2b:01:02:03", `"08:00:2b:01:02:03"`},
		{"macaddr8", pgvalue.OIDMacaddr8, -1, ct("VARCHAR"), "08:00:2b:01:02:03:04:05", `"08:00:2b:01:02:03:04:05"`},
		{"xml", pgvalue.OIDXML, -1, ct("VARCHAR"), `<a b="1">x</a>`, `"<a b=\"1\">x</a>"`},
		{"bit", pgvalue.OIDBit, -1, ct("VARCHAR"), "0101", `"0101"`},
		{"varbit", pgvalue.OIDVarbit, -1, ct("CHAR"), "1", `"1"`},
		{"interval", pgvalue.OIDInterval, -1, ct("VARCHAR"), "P1Y2M3DT4H5M6.5S", `"P1Y2M3DT4H5M6.5S"`},
		{"int4range", pgvalue.OIDInt4Range, -1, ct("VARCHAR"), "[1,5)", `"[1,5)"`},
		{"tstzrange", pgvalue.OIDTstzRange, -1, ct("VARCHAR"), `["2024-01-01 00:00:00+00",)`, `"[\"2024-01-01 00:00:00+00\",)"`},
		{"userRange", 16530, -1, ct("VARCHAR"), "empty", `"empty"`},
		{"multirange", 16531, -1, ct("VARCHAR"), "{[1,2),[3,4)}", `"{[1,2),[3,4)}"`},
		{"array2D", 1007, -1, nested(ct("INTEGER"), 2), "{{1,2},{3,NULL}}", "[[1,2],[3,null]]"},
		{"array3D", 1007, -1, nested(ct("INTEGER"), 3), "{{{1},{2}},{{3},{4}}}", "[[[1],[2]],[[3],[4]]]"},
		{"array2DEmpty", 1007, -1, nested(ct("INTEGER"), 2), "{}", "[]"},
		{"array2DText", 1009, -1, nested(ct("VARCHAR"), 2), `{{"a,b",c},{"}",NULL}}`, `[["a,b","c"],["}",null]]`},
		{"arrayVariantAnyDims", 1007, -1, ct("VARIANT"), "{{1,2},{3,4}}", "[[1,2],[3,4]]"},
		{"floatArrayNaN", 1022, -1, arr("DOUBLE"), "{1.5,NaN,-Infinity}", "[1.5,null,null]"},
		{"numericFits", pgvalue.OIDNumeric, numTypmod(10, 2), dec(10, 2), "12345678.90", `"12345678.90"`},
		{"numericNarrowerFits", pgvalue.OIDNumeric, numTypmod(6, 1), dec(10, 2), "12345.6", `"12345.6"`},
		{"numericUnconstrainedTrailingZeros", pgvalue.OIDNumeric, -1, dec(10, 2), "1.2300", `"1.2300"`},
		{"numericUnconstrainedFits", pgvalue.OIDNumeric, -1, dec(10, 2), "-12345678.9", `"-12345678.9"`},
		{"int8IntoWideDecimal", pgvalue.OIDInt8, -1, dec(20, 0), "9223372036854775807", `"9223372036854775807"`},
		{"int4IntoNarrowDecimal", pgvalue.OIDInt4, -1, dec(5, 2), "999", `"999"`},
		{"numericArrayUnconstrained", 1231, -1, nested(dec(10, 2), 1), "{1.5,NULL}", `["1.5",null]`},
	}
	for _, c := range cases {
		enc, err := pgvalue.Plan(c.oid, c.typmod, c.ft, types)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		got, err := enc(nil, []byte(c.in))
		if err != nil || string(got) != c.want {
			t.Errorf("%s: %q → %s, %v; want %s", c.name, c.in, got, err, c.want)
		}
	}
}

// Every refused pair names the Postgres type (as the user wrote it, a
// domain by its own name), its OID, and the Feldera type.
func TestPlan_Refusals(t *testing.T) {
	cases := []struct {
		name   string
		oid    uint32
		typmod int32
		ft     feldera.ColumnType
		want   []string
	}{
		{"enumIntoInt", 16500, -1, ct("INTEGER"), []string{"mood", "INTEGER", "label"}},
		{"enumIntoVariant", 16500, -1, ct("VARIANT"), []string{"mood", "VARIANT"}},
		{"money", pgvalue.OIDMoney, -1, dec(10, 2), []string{"money", "DECIMAL", "lc_monetary"}},
		{"moneyIntoVarchar", pgvalue.OIDMoney, -1, ct("VARCHAR"), []string{"money", "lc_monetary"}},
		{"moneyArray", 791, -1, arr("VARCHAR"), []string{"money"}},
		{"domainOverMoney", 16513, -1, ct("VARCHAR"), []string{"domain cash", "money", "lc_monetary"}},
		{"domainNarrow", 16510, -1, dec(8, 2), []string{"domain price", "numeric(10,2)", "DECIMAL(8,2)", "DECIMAL(10,2)"}},
		{"domainIntIntoVarbinary", 16511, -1, ct("VARBINARY"), []string{"domain posint", "int4", "VARBINARY"}},
		{"intervalIntoBigint", pgvalue.OIDInterval, -1, ct("BIGINT"), []string{"interval", "BIGINT", "INTERVAL", "ISO 8601"}},
		{"inetIntoBinary", pgvalue.OIDInet, -1, ct("VARBINARY"), []string{"inet", "VARBINARY"}},
		{"rangeIntoInt", pgvalue.OIDInt4Range, -1, ct("INTEGER"), []string{"int4range", "INTEGER"}},
		{"userRangeIntoInt", 16530, -1, ct("INTEGER"), []string{"floatrange", "INTEGER"}},
		{"citextIntoUUID", 16520, -1, ct("UUID"), []string{"citext", "UUID"}},
		{"composite", 16540, -1, ct("VARCHAR"), []string{"point3", "composite"}},
		{"extension", 16550, -1, ct("VARCHAR"), []string{"hstore", "VARCHAR"}},
		{"unknownOID", 99999, -1, ct("VARCHAR"), []string{"99999", "catalog"}},
		{"numericScale", pgvalue.OIDNumeric, numTypmod(12, 4), dec(12, 2), []string{"numeric(12,4)", "DECIMAL(12,2)", "truncate", "DECIMAL(14,4)"}},
		{"numericIntDigits", pgvalue.OIDNumeric, numTypmod(12, 2), dec(10, 2), []string{"numeric(12,2)", "DECIMAL(10,2)", "DECIMAL(12,2)"}},
		{"arrayIntoScalar", 1007, -1, ct("INTEGER"), []string{"int4[]", "INTEGER", "ARRAY"}},
		{"enumArrayIntoIntArray", 16501, -1, arr("INTEGER"), []string{"mood", "INTEGER"}},
	}
	for _, c := range cases {
		_, err := pgvalue.Plan(c.oid, c.typmod, c.ft, types)
		var te *pgvalue.TypeError
		if err == nil || !errors.As(err, &te) || te.OID != c.oid {
			t.Errorf("%s: err = %v, want a TypeError for OID %d", c.name, err, c.oid)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not mention %q", c.name, err, w)
			}
		}
	}
}

func TestPlan_RefusesValuesThatLoseDigits(t *testing.T) {
	cases := []struct {
		name   string
		oid    uint32
		typmod int32
		ft     feldera.ColumnType
		in     string
	}{
		{"scale", pgvalue.OIDNumeric, -1, dec(10, 2), "1.23456"},
		{"intDigits", pgvalue.OIDNumeric, -1, dec(10, 2), "123456789"},
		{"intIntoNarrow", pgvalue.OIDInt8, -1, dec(5, 2), "1000"},
		{"array", 1231, -1, nested(dec(10, 2), 1), "{1.5,1.005}"},
		{"array1DInto2D", 1007, -1, nested(ct("INTEGER"), 2), "{1,2}"},
		{"array2DInto1D", 1007, -1, arr("INTEGER"), "{{1,2}}"},
		{"ragged", 1007, -1, nested(ct("INTEGER"), 2), "{{1},2}"},
		{"bounds", 1007, -1, nested(ct("INTEGER"), 2), "[0:1][1:1]={{1},{2}}"},
	}
	for _, c := range cases {
		enc, err := pgvalue.Plan(c.oid, c.typmod, c.ft, types)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got, err := enc(nil, []byte(c.in)); err == nil {
			t.Errorf("%s: %q accepted as %s", c.name, c.in, got)
		}
	}
}

// The advice for a numeric Feldera's DECIMAL cannot hold is one a user can
// follow: a width past precision 38 (PostgreSQL's own num_data is
// numeric(210,10)) is told to use VARCHAR or narrow the column, never to
// declare a DECIMAL that does not exist.
func TestPlan_NumericAdvice(t *testing.T) {
	typmod := func(p, s int) int32 { return int32(p<<16|s) + 4 }
	_, err := pgvalue.Plan(pgvalue.OIDNumeric, typmod(210, 10), dec(38, 10), types)
	if err == nil || !strings.Contains(err.Error(), "VARCHAR") || strings.Contains(err.Error(), "DECIMAL(210") {
		t.Fatalf("numeric(210,10): %v", err)
	}
	_, err = pgvalue.Plan(pgvalue.OIDNumeric, typmod(20, 6), dec(10, 2), types)
	if err == nil || !strings.Contains(err.Error(), "DECIMAL(20,6) or wider") {
		t.Fatalf("numeric(20,6) into DECIMAL(10,2): %v", err)
	}
	if _, err := pgvalue.Plan(pgvalue.OIDNumeric, typmod(210, 10), ct("VARCHAR"), types); err != nil {
		t.Fatalf("numeric(210,10) into VARCHAR: %v", err)
	}
}
