package pgvalue

import (
	"errors"
	"fmt"

	"github.com/pgfeldera/pgfeldera/feldera"
)

// PGType is what pg_type says about a type the built-in table does not
// know: enums, domains, ranges, extension types (citext), arrays of them.
type PGType struct {
	OID      uint32
	Name     string // format_type(oid, NULL), for messages
	TypName  string // pg_type.typname
	Kind     byte   // typtype: 'b' base, 'e' enum, 'd' domain, 'r' range, 'm' multirange, 'c' composite, 'p' pseudo
	Category byte   // typcategory: 'A' for arrays
	Base     uint32 // a domain's base type
	BaseMod  int32  // a domain's typmod on its base type
	Elem     uint32 // an array's element type
}

// Types looks up a type OID in the catalog; nil knows only the built-ins.
type Types func(oid uint32) (PGType, bool)

// More built-in type OIDs (pg_type.dat). They have encoders only into
// string columns (or, for money, none: see moneyRefusal).
const (
	OIDXML       = 142
	OIDCidr      = 650
	OIDMacaddr8  = 774
	OIDMoney     = 790
	OIDMacaddr   = 829
	OIDInet      = 869
	OIDInterval  = 1186
	OIDBit       = 1560
	OIDVarbit    = 1562
	OIDInt4Range = 3904
	OIDNumRange  = 3906
	OIDTsRange   = 3908
	OIDTstzRange = 3910
	OIDDateRange = 3912
	OIDInt8Range = 3926
)

// stringTypes are the built-ins whose text form is delivered as it is into
// a VARCHAR or CHAR column. Their output does not depend on a setting the
// connector leaves unpinned: inet, cidr, macaddr(8), xml and bit strings
// have one text form; interval is printed with IntervalStyle=iso_8601
// (P1Y2M3DT4H5M6S); ranges as Postgres prints them ([1,5), empty), their
// bounds under the pinned DateStyle and TimeZone.
var stringTypes = map[uint32]string{
	OIDXML: "xml", OIDCidr: "cidr", OIDMacaddr8: "macaddr8", OIDMacaddr: "macaddr", OIDInet: "inet",
	OIDInterval: "interval", OIDBit: "bit", OIDVarbit: "varbit",
	OIDInt4Range: "int4range", OIDNumRange: "numrange", OIDTsRange: "tsrange", OIDTstzRange: "tstzrange",
	OIDDateRange: "daterange", OIDInt8Range: "int8range",
}

var moreArrays = map[uint32]uint32{
	143: OIDXML, 651: OIDCidr, 775: OIDMacaddr8, 791: OIDMoney, 1040: OIDMacaddr, 1041: OIDInet,
	1187: OIDInterval, 1561: OIDBit, 1563: OIDVarbit, 3905: OIDInt4Range, 3907: OIDNumRange,
	3909: OIDTsRange, 3911: OIDTstzRange, 3913: OIDDateRange, 3927: OIDInt8Range,
}

func init() {
	for oid, n := range stringTypes {
		typeNames[oid] = n
	}
	typeNames[OIDMoney] = "money"
	for a, e := range moreArrays {
		arrayOf[a] = e
	}
}

// TypeError is why a Postgres type cannot go into a Feldera column. Type
// names the Postgres type as the user wrote it (a domain by its own name).
type TypeError struct {
	Type   string
	OID    uint32
	Reason string
}

func (e *TypeError) Error() string { return e.Reason }

// Plan is an encoder chosen for one (Postgres type, typmod, Feldera type).
// Postgres names the type for messages.
func Plan(oid uint32, typmod int32, ft feldera.ColumnType, types Types) (Encoder, error) {
	return plan(oid, typmod, ft, types, 0)
}

func lookupName(oid uint32, types Types) string {
	if n := TypeName(oid); n != "" {
		return n
	}
	if types != nil {
		if t, ok := types(oid); ok {
			return t.Name
		}
	}
	return "unknown"
}

func plan(oid uint32, typmod int32, ft feldera.ColumnType, types Types, depth int) (Encoder, error) {
	if depth > 16 {
		return nil, &TypeError{Type: lookupName(oid, types), OID: oid, Reason: "type nesting too deep"}
	}
	name := lookupName(oid, types)
	noEnc := func(why string) error {
		r := fmt.Sprintf("Postgres type %s has no faithful encoding into Feldera type %s", name, DescribeType(ft))
		if why != "" {
			r += ": " + why
		}
		return &TypeError{Type: name, OID: oid, Reason: r}
	}
	if oid == OIDMoney {
		return nil, noEnc("the text form of money follows lc_monetary (currency symbol, separators), so no canonical form is pinned; store it as numeric(…, 2) in Postgres, or cast it in a view")
	}
	if elem, ok := arrayOf[oid]; ok {
		return planArray(oid, elem, typmod, ft, types, depth)
	}
	if _, ok := typeNames[oid]; ok {
		return planBuiltin(oid, typmod, ft, name, noEnc)
	}
	var t PGType
	ok := false
	if types != nil {
		t, ok = types(oid)
	}
	if !ok {
		return nil, &TypeError{Type: name, OID: oid, Reason: fmt.Sprintf("type %s (OID %d) is not in the catalog the connector read", name, oid)}
	}
	return planCatalog(oid, typmod, ft, t, types, depth, noEnc)
}

// planBuiltin plans a built-in scalar type, named name. noEnc makes the
// refusal of the pair with a reason.
func planBuiltin(oid uint32, typmod int32, ft feldera.ColumnType, name string, noEnc func(why string) error) (Encoder, error) {
	if n, ok := stringTypes[oid]; ok {
		switch ft.Type {
		case "VARCHAR", "CHAR":
			return encString, nil
		}
		if oid == OIDInterval {
			return nil, noEnc("Feldera tables cannot hold INTERVAL; deliver it into a VARCHAR column, as ISO 8601 (P1Y2M3DT4H5M6S)")
		}
		return nil, noEnc(n + " goes only into VARCHAR or CHAR, as its text form")
	}
	enc, err := builtinEncoder(oid, typmod, ft)
	if errors.Is(err, ErrNoEncoding) {
		return nil, noEnc("")
	}
	if err != nil {
		return nil, &TypeError{Type: name, OID: oid, Reason: err.Error()}
	}
	return enc, nil
}

// planCatalog plans a type the catalog describes as t: a domain by its
// base type, an enum, range or citext as its text form, an array by its
// element; other kinds are refused. noEnc makes the refusal of the pair
// with a reason.
func planCatalog(oid uint32, typmod int32, ft feldera.ColumnType, t PGType, types Types, depth int, noEnc func(why string) error) (Encoder, error) {
	switch {
	case t.Kind == 'd':
		enc, err := plan(t.Base, t.BaseMod, ft, types, depth+1)
		if err != nil {
			return nil, domainError(t, types, err)
		}
		return enc, nil
	case t.Kind == 'e':
		switch ft.Type {
		case "VARCHAR", "CHAR":
			return encString, nil
		}
		return nil, noEnc(fmt.Sprintf("enum %s delivers its label, so only into VARCHAR or CHAR", t.Name))
	case t.Kind == 'r' || t.Kind == 'm':
		switch ft.Type {
		case "VARCHAR", "CHAR":
			return encString, nil
		}
		return nil, noEnc(fmt.Sprintf("range %s goes only into VARCHAR or CHAR, as its text form", t.Name))
	case t.Category == 'A' && t.Elem != 0:
		return planArray(oid, t.Elem, typmod, ft, types, depth)
	case t.Kind == 'b' && t.TypName == "citext":
		switch ft.Type {
		case "VARCHAR", "CHAR":
			return encString, nil
		}
		return nil, noEnc("citext goes only into VARCHAR or CHAR")
	case t.Kind == 'c':
		return nil, noEnc("composite types are refused; expand the fields into columns, or cast it in a view")
	}
	return nil, noEnc("user-defined and extension types other than enums, domains, ranges and citext are refused; cast it in a view or change the column type")
}

// planArray plans an array column. Postgres array types carry no number of
// dimensions, so the Feldera type decides it: T ARRAY takes
// one-dimensional values, T ARRAY ARRAY two-dimensional ones, VARIANT any.
func planArray(oid, elem uint32, typmod int32, ft feldera.ColumnType, types Types, depth int) (Encoder, error) {
	if ft.Type == "VARIANT" {
		inner, err := plan(elem, typmod, feldera.ColumnType{Type: "VARIANT", Nullable: true}, types, depth+1)
		if err != nil {
			return nil, arrayError(oid, types, err)
		}
		return arrayEncoder(inner, 0), nil
	}
	dims := 0
	leaf := ft
	for leaf.Type == "ARRAY" && leaf.Component != nil {
		dims++
		leaf = *leaf.Component
	}
	if dims == 0 {
		name := lookupName(oid, types)
		return nil, &TypeError{Type: name, OID: oid, Reason: fmt.Sprintf("Postgres type %s has no faithful encoding into Feldera type %s: an array goes into an ARRAY or VARIANT column", name, DescribeType(ft))}
	}
	inner, err := plan(elem, typmod, leaf, types, depth+1)
	if err != nil {
		return nil, arrayError(oid, types, err)
	}
	return arrayEncoder(inner, dims), nil
}

// domainError names the domain around its base type's refusal.
func domainError(t PGType, types Types, err error) error {
	var te *TypeError
	if !errors.As(err, &te) {
		return err
	}
	return &TypeError{Type: t.Name, OID: t.OID, Reason: fmt.Sprintf("domain %s over %s: %s", t.Name, lookupName(t.Base, types), te.Reason)}
}

// arrayError names the array type around its element's refusal.
func arrayError(oid uint32, types Types, err error) error {
	var te *TypeError
	if !errors.As(err, &te) {
		return err
	}
	name := lookupName(oid, types)
	return &TypeError{Type: name, OID: oid, Reason: fmt.Sprintf("array type %s: %s", name, te.Reason)}
}

// DescribeType names a Feldera column type for messages: INTEGER ARRAY.
func DescribeType(ct feldera.ColumnType) string {
	if ct.Type == "ARRAY" && ct.Component != nil {
		return DescribeType(*ct.Component) + " ARRAY"
	}
	return ct.Type
}
