package pgvalue

import (
	"fmt"
)

func digitsAt(s []byte, at, n int) bool {
	if at+n > len(s) {
		return false
	}
	for _, c := range s[at : at+n] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// isDate checks ISO date output YYYY-MM-DD (no BC, no infinity).
func isDate(s []byte) bool {
	return len(s) == 10 && digitsAt(s, 0, 4) && s[4] == '-' && digitsAt(s, 5, 2) && s[7] == '-' && digitsAt(s, 8, 2)
}

func encDate(dst, s []byte) ([]byte, error) {
	if !isDate(s) {
		return dst, &Unrepresentable{Value: string(s), Why: "Feldera's DATE cannot hold (BC, infinity, or year > 9999) the date"}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"'), nil
}

// timeLen is the length of HH:MM:SS[.ffffff] at the start of s, or -1.
func timeLen(s []byte) int {
	if !(digitsAt(s, 0, 2) && len(s) >= 8 && s[2] == ':' && digitsAt(s, 3, 2) && s[5] == ':' && digitsAt(s, 6, 2)) {
		return -1
	}
	n := 8
	if n < len(s) && s[n] == '.' {
		n++
		for n < len(s) && s[n] >= '0' && s[n] <= '9' {
			n++
		}
		if n == 9 {
			return -1
		}
	}
	return n
}

func encTime(dst, s []byte) ([]byte, error) {
	if timeLen(s) != len(s) {
		return dst, fmt.Errorf("invalid time %q", s)
	}
	if string(s[:2]) == "24" {
		return dst, &Unrepresentable{Value: string(s), Why: "Feldera's TIME cannot hold the time"}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"'), nil
}

// parseOffset reads a Postgres UTC offset (+HH, +HH:MM, +HH:MM:SS) into
// seconds east of UTC.
func parseOffset(s []byte) (int, bool) {
	if len(s) < 3 || (s[0] != '+' && s[0] != '-') || !digitsAt(s, 1, 2) {
		return 0, false
	}
	secs := atoi2(s[1:]) * 3600
	rest := s[3:]
	for _, mul := range []int{60, 1} {
		if len(rest) == 0 {
			break
		}
		if len(rest) < 3 || rest[0] != ':' || !digitsAt(rest, 1, 2) {
			return 0, false
		}
		secs += atoi2(rest[1:]) * mul
		rest = rest[3:]
	}
	if len(rest) != 0 {
		return 0, false
	}
	if s[0] == '-' {
		secs = -secs
	}
	return secs, true
}

func atoi2(s []byte) int { return int(s[0]-'0')*10 + int(s[1]-'0') }

// encTimetzUTC turns a time with offset into the UTC time of day.
func encTimetzUTC(dst, s []byte) ([]byte, error) {
	n := timeLen(s)
	if n < 0 {
		return dst, fmt.Errorf("timetz %q cannot be sent to Feldera", s)
	}
	off, ok := parseOffset(s[n:])
	if !ok {
		return dst, fmt.Errorf("timetz %q has no valid offset", s)
	}
	secs := atoi2(s)*3600 + atoi2(s[3:])*60 + atoi2(s[6:]) - off
	secs = ((secs % 86400) + 86400) % 86400
	dst = append(dst, '"')
	dst = append2(dst, secs/3600)
	dst = append(dst, ':')
	dst = append2(dst, secs/60%60)
	dst = append(dst, ':')
	dst = append2(dst, secs%60)
	dst = append(dst, s[8:n]...)
	return append(dst, '"'), nil
}

func append2(dst []byte, v int) []byte { return append(dst, byte('0'+v/10), byte('0'+v%10)) }

// tsLen checks "YYYY-MM-DD HH:MM:SS[.ffffff]" at the start of s and
// returns its length, or -1.
func tsLen(s []byte) int {
	if len(s) < 19 || !isDate(s[:10]) || s[10] != ' ' {
		return -1
	}
	n := timeLen(s[11:])
	if n < 0 {
		return -1
	}
	return 11 + n
}

func encTimestamp(dst, s []byte) ([]byte, error) {
	if tsLen(s) != len(s) {
		return dst, &Unrepresentable{Value: string(s), Why: "Feldera's TIMESTAMP cannot hold (BC, infinity, or year > 9999) the timestamp"}
	}
	dst = append(dst, '"')
	dst = append(dst, s[:10]...)
	dst = append(dst, 'T')
	dst = append(dst, s[11:]...)
	return append(dst, '"'), nil
}

// encTimestamptz writes the instant with an explicit offset Feldera accepts:
// "Z" for UTC (the pinned session), else ±HH:MM. Postgres's short "+00" and
// second-precision offsets are never passed through.
func encTimestamptz(dst, s []byte) ([]byte, error) {
	n := tsLen(s)
	if n < 0 {
		return dst, &Unrepresentable{Value: string(s), Why: "Feldera's TIMESTAMP cannot hold (BC, infinity, or year > 9999) the timestamptz"}
	}
	off, ok := parseOffset(s[n:])
	if !ok {
		return dst, fmt.Errorf("timestamptz %q has no valid offset", s)
	}
	dst = append(dst, '"')
	dst = append(dst, s[:10]...)
	dst = append(dst, 'T')
	dst = append(dst, s[11:n]...)
	switch {
	case off == 0:
		dst = append(dst, 'Z')
	case off%60 != 0:
		return dst, fmt.Errorf("timestamptz %q has a seconds offset; pin TimeZone=UTC", s)
	default:
		a := off
		sign := byte('+')
		if a < 0 {
			sign, a = '-', -a
		}
		dst = append(dst, sign)
		dst = append2(dst, a/3600)
		dst = append(dst, ':')
		dst = append2(dst, a/60%60)
	}
	return append(dst, '"'), nil
}
