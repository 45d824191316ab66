package pgvalue

import (
	"strconv"
	"strings"
	"testing"
)

// Every type Suggest proposes for a built-in passes Plan: ddl never
// prints a schema startup refuses. Money is refused by both.
func TestSuggest_AcceptedByPlan(t *testing.T) {
	var oids []uint32
	for oid := range typeNames {
		oids = append(oids, oid)
	}
	for a := range arrayOf {
		oids = append(oids, a)
	}
	for _, oid := range oids {
		for _, typmod := range []int32{-1, (10<<16 | 2) + 4, (5<<16 | 0x7fe) + 4 /* numeric(5,-2) */} {
			ct, err := Suggest(oid, typmod, 0, nil)
			if oid == OIDMoney || arrayOf[oid] == OIDMoney {
				if err == nil || !strings.Contains(err.Error(), "lc_monetary") {
					t.Errorf("money: %v, %v", ct, err)
				}
				continue
			}
			if err != nil {
				t.Errorf("%s: %v", TypeName(oid), err)
				continue
			}
			if _, err := Plan(oid, typmod, ct, nil); err != nil {
				t.Errorf("%s (typmod %d): Suggest says %s, Plan refuses: %v", TypeName(oid), typmod, DescribeType(ct), err)
			}
		}
	}
	cases := []struct {
		oid    uint32
		typmod int32
		dims   int
		want   string
	}{
		{OIDNumeric, (10<<16 | 2) + 4, 0, "DECIMAL(10,2)"},
		{OIDNumeric, (5<<16 | 0x7fe) + 4, 0, "DECIMAL(7,0)"},
		{OIDNumeric, (3<<16 | 5) + 4, 0, "DECIMAL(5,5)"},
		{OIDNumeric, -1, 0, "DECIMAL(38,10)"},
		{1007, -1, 2, "INTEGER ARRAY ARRAY"},
		{OIDTimestamptz, -1, 0, "TIMESTAMP"},
		{OIDInet, -1, 0, "VARCHAR"},
	}
	for _, c := range cases {
		ct, err := Suggest(c.oid, c.typmod, c.dims, nil)
		got := DescribeType(ct)
		if ct.Type == "DECIMAL" {
			got = "DECIMAL(" + strconv.Itoa(*ct.Precision) + "," + strconv.Itoa(*ct.Scale) + ")"
		}
		if err != nil || got != c.want {
			t.Errorf("Suggest(%d, %d, %d) = %s, %v; want %s", c.oid, c.typmod, c.dims, got, err, c.want)
		}
	}
	if _, err := Suggest(OIDNumeric, (40<<16|2)+4, 0, nil); err == nil || !strings.Contains(err.Error(), "numeric(40,2)") {
		t.Errorf("numeric(40,2): %v", err)
	}
	// A domain is suggested by its base; an enum, range or citext is VARCHAR.
	types := func(oid uint32) (PGType, bool) {
		switch oid {
		case 90001:
			return PGType{OID: oid, Name: "price", Kind: 'd', Base: OIDNumeric, BaseMod: (10<<16 | 2) + 4}, true
		case 90002:
			return PGType{OID: oid, Name: "mood", Kind: 'e'}, true
		case 90003:
			return PGType{OID: oid, Name: "pair", Kind: 'c'}, true
		}
		return PGType{}, false
	}
	if ct, err := Suggest(90001, -1, 0, types); err != nil || ct.Type != "DECIMAL" || *ct.Precision != 10 {
		t.Errorf("domain: %+v, %v", ct, err)
	}
	if ct, err := Suggest(90002, -1, 0, types); err != nil || ct.Type != "VARCHAR" {
		t.Errorf("enum: %+v, %v", ct, err)
	}
	if _, err := Suggest(90003, -1, 0, types); err == nil || !strings.Contains(err.Error(), "composite") {
		t.Errorf("composite: %v", err)
	}
}
