// Package jsonscan splits JSON objects into their members without
// decoding them. The Feldera double reads every record the connector
// sends and the oracle every row it compares, millions of small objects
// under the race detector, where encoding/json's reflection and
// allocations were a third of the test processes' CPU. Anything this
// package does not take on (an escaped key, invalid JSON) it reports as
// not ok, and the caller takes encoding/json's path, whose answers and
// errors stay the reference.
package jsonscan

import "unicode/utf8"

// Member is one member of an object: its key and its value's bytes (a
// subslice of the input).
type Member struct {
	Key   string
	Value []byte
}

// Object splits raw, one JSON object with optional surrounding whitespace,
// into its members in order (a repeated key appears twice, as written).
// ok is false when raw is not exactly one valid object, or when a key
// holds an escape or invalid UTF-8.
func Object(raw []byte, into []Member) (members []Member, ok bool) {
	b := raw[skipSpace(raw, 0):]
	if len(b) == 0 || b[0] != '{' {
		return nil, false
	}
	members = into[:0]
	i := skipSpace(b, 1)
	if i < len(b) && b[i] == '}' {
		return members, skipSpace(b, i+1) == len(b)
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return nil, false
		}
		n := str(b[i:])
		if n < 0 {
			return nil, false
		}
		key := b[i+1 : i+n-1]
		if !plainKey(key) {
			return nil, false
		}
		i = skipSpace(b, i+n)
		if i >= len(b) || b[i] != ':' {
			return nil, false
		}
		i = skipSpace(b, i+1)
		v := value(b[i:], 1)
		if v < 0 {
			return nil, false
		}
		members = append(members, Member{Key: string(key), Value: b[i : i+v]})
		i = skipSpace(b, i+v)
		if i >= len(b) {
			return nil, false
		}
		if b[i] == '}' {
			return members, skipSpace(b, i+1) == len(b)
		}
		if b[i] != ',' {
			return nil, false
		}
		i = skipSpace(b, i+1)
	}
}

// maxDepth bounds nesting: encoding/json refuses values nested deeper
// than 10,000 levels, and a value this package gives up on goes to
// encoding/json, so any bound below that keeps the two in agreement.
const maxDepth = 512

// Value returns the length of the valid JSON value at the start of b, or
// -1 when b does not start with one (or nests deeper than maxDepth).
func Value(b []byte) int { return value(b, 0) }

func value(b []byte, depth int) int {
	if len(b) == 0 {
		return -1
	}
	switch c := b[0]; {
	case c == '"':
		return str(b)
	case c == '{', c == '[':
		if depth >= maxDepth {
			return -1
		}
		end := byte('}')
		if c == '[' {
			end = ']'
		}
		return composite(b, end, depth+1)
	case c == 't':
		return literal(b, "true")
	case c == 'f':
		return literal(b, "false")
	case c == 'n':
		return literal(b, "null")
	case c == '-' || c >= '0' && c <= '9':
		return number(b)
	}
	return -1
}

// composite is value of an object or array at depth.
func composite(b []byte, end byte, depth int) int {
	i := skipSpace(b, 1)
	if i < len(b) && b[i] == end {
		return i + 1
	}
	for {
		if end == '}' {
			if i >= len(b) || b[i] != '"' {
				return -1
			}
			n := str(b[i:])
			if n < 0 {
				return -1
			}
			i = skipSpace(b, i+n)
			if i >= len(b) || b[i] != ':' {
				return -1
			}
			i = skipSpace(b, i+1)
		}
		n := value(b[i:], depth)
		if n < 0 {
			return -1
		}
		i = skipSpace(b, i+n)
		if i >= len(b) {
			return -1
		}
		if b[i] == end {
			return i + 1
		}
		if b[i] != ',' {
			return -1
		}
		i = skipSpace(b, i+1)
	}
}

// str is Value of a string: escapes checked, no control characters.
func str(b []byte) int {
	for i := 1; i < len(b); {
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c < 0x20:
			return -1
		case c == '\\':
			if i+1 >= len(b) {
				return -1
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) {
					return -1
				}
				for _, h := range b[i+2 : i+6] {
					if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
						return -1
					}
				}
				i += 6
			default:
				return -1
			}
		default:
			i++
		}
	}
	return -1
}

func literal(b []byte, lit string) int {
	if len(b) < len(lit) || string(b[:len(lit)]) != lit {
		return -1
	}
	return len(lit)
}

// number is Value of a number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func number(b []byte) int {
	i := 0
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(b, i)
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return -1
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return -1
		}
		i = j
	}
	return i
}

func digits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

// Trim removes JSON whitespace (space, tab, newline, carriage return)
// from both ends of b; other Unicode spaces are not JSON's and stay.
func Trim(b []byte) []byte {
	b = b[skipSpace(b, 0):]
	for len(b) > 0 {
		switch b[len(b)-1] {
		case ' ', '\t', '\n', '\r':
			b = b[:len(b)-1]
			continue
		}
		break
	}
	return b
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// plainKey: a key that unquotes to itself (no escape; valid UTF-8, which
// encoding/json would otherwise replace).
func plainKey(key []byte) bool {
	for _, c := range key {
		if c == '\\' {
			return false
		}
	}
	return utf8.Valid(key)
}

// Plain reports whether b is a JSON string that encoding/json would encode
// again byte for byte: valid UTF-8 with no escape, no control character,
// none of <, > and & (escaped for HTML) and no U+2028 or U+2029.
func Plain(b []byte) bool {
	if len(b) < 2 || b[0] != '"' || b[len(b)-1] != '"' {
		return false
	}
	s := b[1 : len(b)-1]
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
				return false
			}
			i++
			continue
		}
		r, n := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && n == 1 || r == '\u2028' || r == '\u2029' {
			return false
		}
		i += n
	}
	return true
}
