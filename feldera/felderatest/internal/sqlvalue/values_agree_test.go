package sqlvalue

import (
	"encoding/json"
	"testing"

	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/verify"
)

// The double's stored form of a value (Normalize: what its /query prints)
// and the value pgfeldera sent must be one value to verify.Canonical, or
// `pgfeldera verify` and the tests' oracle would report a difference that
// is not there (or miss one that is). The two canonicalisers are written
// separately on purpose (one imitates Feldera's input checks, the other
// compares); this keeps them from drifting apart, type by type.
func TestNormalizeAgreesWithVerify(t *testing.T) {
	p := func(n int) *int { return &n }
	col := func(typ string) feldera.ColumnType { return feldera.ColumnType{Type: typ, Nullable: true} }
	dec := func(prec, scale int) feldera.ColumnType {
		return feldera.ColumnType{Type: "DECIMAL", Nullable: true, Precision: p(prec), Scale: p(scale)}
	}
	arr := func(c feldera.ColumnType) feldera.ColumnType {
		return feldera.ColumnType{Type: "ARRAY", Nullable: true, Component: &c}
	}
	cases := []struct {
		ct   feldera.ColumnType
		sent string // as pgfeldera's encoders write it
	}{
		{col("BOOLEAN"), `true`}, {col("BOOLEAN"), `null`},
		{col("BIGINT"), `42`}, {col("BIGINT"), `-9223372036854775808`}, {col("INTEGER"), `0`}, {col("SMALLINT"), `-7`},
		{dec(12, 2), `"12.50"`}, {dec(12, 2), `"-0.00"`}, {dec(12, 2), `"0.01"`}, {dec(38, 2), `"1234567890123456789012345.10"`},
		{col("DOUBLE"), `0.1`}, {col("DOUBLE"), `1e300`}, {col("DOUBLE"), `-0`}, {col("REAL"), `1.10000002`},
		{col("VARCHAR"), `"a\"b"`}, {col("VARCHAR"), `"é\u00e9\n"`}, {col("VARCHAR"), `""`}, {col("CHAR"), `"ab   "`},
		{col("DATE"), `"2024-02-29"`}, {col("DATE"), `"0001-01-01"`},
		{col("TIME"), `"12:34:56.500000"`}, {col("TIME"), `"00:00:00"`},
		{col("TIMESTAMP"), `"2030-01-01 00:01:01"`}, {col("TIMESTAMP"), `"2030-01-01 00:01:01.120000"`},
		{col("TIMESTAMP_TZ"), `"2030-01-01 02:01:01+02:00"`}, {col("TIMESTAMP_TZ"), `"2030-01-01T00:01:01.5Z"`},
		{col("UUID"), `"A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"`}, {col("UUID"), `"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"`},
		{col("VARBINARY"), `[222,173,190,239]`}, {col("BINARY"), `[]`},
		{col("VARIANT"), `{"b":1,"a":[true,null]}`}, {col("VARIANT"), `{"k": 123456, "v": "payload"}`},
		{col("VARIANT"), `[1, 2.5, "x", {"z": {"y": null}}]`}, {col("VARIANT"), `"text"`},
		{arr(col("INTEGER")), `[1,2,null]`}, {arr(col("VARCHAR")), `["a","b"]`}, {arr(dec(10, 2)), `["1.50","-2"]`},
	}
	for _, c := range cases {
		stored, err := Normalize(c.ct, json.RawMessage(c.sent))
		if err != nil {
			t.Errorf("%s %s: the double refuses it: %v", c.ct.Type, c.sent, err)
			continue
		}
		a, err := verify.Canonical(c.ct, json.RawMessage(c.sent))
		if err != nil {
			t.Errorf("%s %s: verify refuses what was sent: %v", c.ct.Type, c.sent, err)
			continue
		}
		b, err := verify.Canonical(c.ct, stored)
		if err != nil {
			t.Errorf("%s %s: verify refuses the double's form %s: %v", c.ct.Type, c.sent, stored, err)
			continue
		}
		if a != b {
			t.Errorf("%s: sent %s → %s; the double stores %s → %s", c.ct.Type, c.sent, a, stored, b)
		}
	}
}
