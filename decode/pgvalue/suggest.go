package pgvalue

import (
	"fmt"

	"github.com/pgfeldera/pgfeldera/feldera"
)

// MaxDecimalPrecision is the widest DECIMAL Feldera declares.
const MaxDecimalPrecision = 38

// UnconstrainedDecimal is the Feldera type Suggest proposes for numeric
// without a typmod; each value is then checked against it (see Plan).
var UnconstrainedDecimal = [2]int{MaxDecimalPrecision, 10}

// Suggest proposes the Feldera column type for a Postgres column: the
// first, most faithful type of the decoder's mapping (the type table in
// docs/operations.md). dims is pg_attribute.attndims for arrays (0 is
// taken as one dimension). The result is not nullable; the caller sets
// that. What it proposes must still pass Plan, which is the rule; Suggest
// is only the choice among what Plan accepts. Types Plan refuses (money,
// composites, unknown extension types) are refused here with Plan's reason.
func Suggest(oid uint32, typmod int32, dims int, types Types) (feldera.ColumnType, error) {
	return suggest(oid, typmod, dims, types, 0)
}

func suggest(oid uint32, typmod int32, dims int, types Types, depth int) (feldera.ColumnType, error) {
	ct := func(t string) (feldera.ColumnType, error) { return feldera.ColumnType{Type: t}, nil }
	if depth > 16 {
		return feldera.ColumnType{}, &TypeError{Type: lookupName(oid, types), OID: oid, Reason: "type nesting too deep"}
	}
	elem, isArray := arrayOf[oid]
	if !isArray && types != nil {
		if t, ok := types(oid); ok && t.Category == 'A' && t.Elem != 0 && t.Kind != 'd' {
			elem, isArray = t.Elem, true
		}
	}
	if isArray {
		return suggestArray(oid, elem, typmod, dims, types, depth)
	}
	switch oid {
	case OIDBool:
		return ct("BOOLEAN")
	case OIDInt2:
		return ct("SMALLINT")
	case OIDInt4:
		return ct("INTEGER")
	case OIDInt8, OIDOID:
		return ct("BIGINT")
	case OIDFloat4:
		return ct("REAL")
	case OIDFloat8:
		return ct("DOUBLE")
	case OIDNumeric:
		return suggestNumeric(oid, typmod)
	case OIDText, OIDVarchar, OIDBpchar, OIDName, OIDChar:
		return ct("VARCHAR")
	case OIDUUID:
		return ct("UUID")
	case OIDDate:
		return ct("DATE")
	case OIDTime, OIDTimetz:
		return ct("TIME")
	case OIDTimestamp, OIDTimestamptz:
		return ct("TIMESTAMP")
	case OIDJSON, OIDJSONB:
		return ct("VARIANT")
	case OIDBytea:
		return ct("VARBINARY")
	}
	if _, ok := stringTypes[oid]; ok {
		return ct("VARCHAR")
	}
	return suggestCatalog(oid, typmod, dims, types, depth)
}

// suggestArray proposes the type of an array of elem with dims dimensions
// (0 is taken as one): the element's type, ARRAY once per dimension.
func suggestArray(oid, elem uint32, typmod int32, dims int, types Types, depth int) (feldera.ColumnType, error) {
	inner, err := suggest(elem, typmod, 0, types, depth+1)
	if err != nil {
		return inner, arrayError(oid, types, err)
	}
	if dims < 1 {
		dims = 1
	}
	for i := 0; i < dims; i++ {
		c := inner
		c.Nullable = true
		inner = feldera.ColumnType{Type: "ARRAY", Component: &c}
	}
	return inner, nil
}

// suggestNumeric proposes the DECIMAL for numeric with typmod: its own
// precision and scale (a negative scale as whole digits), or
// UnconstrainedDecimal without one; wider than Feldera's DECIMAL is refused.
func suggestNumeric(oid uint32, typmod int32) (feldera.ColumnType, error) {
	P, S := UnconstrainedDecimal[0], UnconstrainedDecimal[1]
	if p, s, ok := numericTypmod(typmod); ok {
		S = max(s, 0)
		P = max(p-s, 0) + S
		if P > MaxDecimalPrecision {
			return feldera.ColumnType{}, &TypeError{Type: "numeric", OID: oid, Reason: fmt.Sprintf("numeric(%d,%d) needs DECIMAL(%d,%d), wider than Feldera's %d digits: declare it VARCHAR (exact) or DOUBLE in Feldera", p, s, P, S, MaxDecimalPrecision)}
		}
	}
	return feldera.ColumnType{Type: "DECIMAL", Precision: &P, Scale: &S}, nil
}

// suggestCatalog proposes the type of what the catalog knows: a domain's
// base type, VARCHAR for an enum, range or citext. Anything else gets
// Plan's refusal.
func suggestCatalog(oid uint32, typmod int32, dims int, types Types, depth int) (feldera.ColumnType, error) {
	var t PGType
	ok := false
	if types != nil {
		t, ok = types(oid)
	}
	if ok {
		switch {
		case t.Kind == 'd':
			c, err := suggest(t.Base, t.BaseMod, dims, types, depth+1)
			if err != nil {
				return c, domainError(t, types, err)
			}
			return c, nil
		case t.Kind == 'e', t.Kind == 'r', t.Kind == 'm', t.Kind == 'b' && t.TypName == "citext":
			return feldera.ColumnType{Type: "VARCHAR"}, nil
		}
	}
	// Plan says why it refuses (money, composites, other types).
	_, err := Plan(oid, typmod, feldera.ColumnType{Type: "VARCHAR", Nullable: true}, types)
	if err == nil {
		err = &TypeError{Type: lookupName(oid, types), OID: oid, Reason: "no Feldera type to propose"}
	}
	return feldera.ColumnType{}, err
}
