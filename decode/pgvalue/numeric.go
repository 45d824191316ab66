package pgvalue

import (
	"fmt"

	"github.com/pgfeldera/pgfeldera/feldera"
)

// Feldera truncates a decimal to the column's scale and fails the whole
// request when the integer part is too long (API.md §6). Neither may
// happen silently: a column that can hold a value DECIMAL(P, S) would
// truncate is refused at startup, and where the Postgres type does not
// bound its digits (numeric without a typmod, integers into a narrow
// DECIMAL) each value is checked.

// numericTypmod reads numeric's atttypmod: ((precision << 16) | scale) + 4,
// the scale an 11-bit signed field (negative scales since PG 15); -1 is an
// unconstrained numeric.
func numericTypmod(typmod int32) (precision, scale int, ok bool) {
	if typmod < 4 {
		return 0, 0, false
	}
	t := typmod - 4
	precision = int(t>>16) & 0xffff
	scale = (int(t&0x7ff) ^ 1024) - 1024
	return precision, scale, true
}

func decimalOf(ft feldera.ColumnType) (precision, scale int, ok bool) {
	if ft.Precision == nil || ft.Scale == nil {
		return 0, 0, false
	}
	return *ft.Precision, *ft.Scale, true
}

// numericDecimal: numeric(p, s) into DECIMAL(P, S) is exact when it has no
// more integer digits (p-s ≤ P-S) and no larger scale (s ≤ S).
func numericDecimal(typmod int32, ft feldera.ColumnType) (Encoder, error) {
	P, S, known := decimalOf(ft)
	if !known {
		return encNumericString, nil
	}
	if p, s, ok := numericTypmod(typmod); ok {
		if p-s <= P-S && s <= S {
			return encNumericString, nil
		}
		needS := max(s, S)
		needP := max(p-s, P-S) + needS
		advice := fmt.Sprintf("declare it DECIMAL(%d,%d) or wider in Feldera", needP, needS)
		if needP > MaxDecimalPrecision {
			// Feldera's DECIMAL stops at precision 38: no DECIMAL holds it.
			advice = fmt.Sprintf("no Feldera DECIMAL holds it (precision stops at %d): declare it VARCHAR in Feldera (the exact digits, as text), or narrow the Postgres column to numeric(%d,%d) or less if its values fit",
				MaxDecimalPrecision, MaxDecimalPrecision, min(s, MaxDecimalPrecision/2))
		}
		return nil, fmt.Errorf("numeric(%d,%d) holds values DECIMAL(%d,%d) would truncate or overflow (%d integer and %d fraction digits against %d and %d): %s",
			p, s, P, S, p-s, max(s, 0), P-S, S, advice)
	}
	return checkedDecimal(P, S, encNumericString), nil
}

// intDecimal: an integer into DECIMAL(P, S) needs P-S integer digits.
func intDecimal(oid uint32, ft feldera.ColumnType) Encoder {
	P, S, known := decimalOf(ft)
	digits := map[uint32]int{OIDInt2: 5, OIDInt4: 10, OIDInt8: 19, OIDOID: 10}[oid]
	if !known || P-S >= digits {
		return encNumericString
	}
	return checkedDecimal(P, S, encNumericString)
}

// checkedDecimal refuses a value with more integer digits than P-S or more
// significant fraction digits than S (trailing zeros do not count).
func checkedDecimal(P, S int, enc Encoder) Encoder {
	return func(dst, s []byte) ([]byte, error) {
		if isNonFinite(s) {
			return dst, nonFinite(s)
		}
		v := s
		if len(v) > 0 && v[0] == '-' {
			v = v[1:]
		}
		intPart, frac := v, []byte(nil)
		for i, c := range v {
			if c == '.' {
				intPart, frac = v[:i], v[i+1:]
				break
			}
		}
		for len(intPart) > 0 && intPart[0] == '0' {
			intPart = intPart[1:]
		}
		for len(frac) > 0 && frac[len(frac)-1] == '0' {
			frac = frac[:len(frac)-1]
		}
		if len(intPart) > P-S || len(frac) > S {
			return dst, fmt.Errorf("numeric value %s does not fit DECIMAL(%d,%d) without losing digits", clip(s), P, S)
		}
		return enc(dst, s)
	}
}
