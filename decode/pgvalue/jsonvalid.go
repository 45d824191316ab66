package pgvalue

// validJSON reports whether s is one JSON value (RFC 8259) with optional
// surrounding whitespace: what encoding/json.Valid reports, which
// FuzzValidJSON checks byte for byte. A json or jsonb value goes into the
// NDJSON line as it is (encJSONInline), so it is checked first; with
// encoding/json.Valid that check was a quarter of pgfeldera's CPU on a
// table with one small jsonb column (bench k), as its scanner calls a
// function per byte. This one walks the bytes in a loop, keeping only
// the open containers, and allocates nothing below maxJSONDepth/64
// levels.
func validJSON(s []byte) bool {
	var stackBuf [64]byte
	stack := stackBuf[:0] // '{' or '[' per open container
	i := skipWS(s, 0)
	for {
		// A value starts at i.
		if i >= len(s) {
			return false
		}
		switch c := s[i]; {
		case c == '{' || c == '[':
			if len(stack) >= maxJSONDepth {
				return false
			}
			stack = append(stack, c)
			i = skipWS(s, i+1)
			if i < len(s) && s[i] == closer(c) {
				stack = stack[:len(stack)-1]
				i++
				break
			}
			if c == '{' {
				if i = objectKey(s, i); i < 0 {
					return false
				}
			}
			continue
		default:
			if i = endOfScalar(s, i); i < 0 {
				return false
			}
		}
		// A value ended before i: what follows it in its container.
		for {
			i = skipWS(s, i)
			if len(stack) == 0 {
				return i == len(s)
			}
			if i >= len(s) {
				return false
			}
			top := stack[len(stack)-1]
			if s[i] == closer(top) {
				stack = stack[:len(stack)-1]
				i++
				continue
			}
			if s[i] != ',' {
				return false
			}
			i = skipWS(s, i+1)
			if top == '{' {
				if i = objectKey(s, i); i < 0 {
					return false
				}
			}
			break
		}
	}
}

// endOfScalar returns the index after the string, number, true, false or
// null that starts at s[i], or -1.
func endOfScalar(s []byte, i int) int {
	switch c := s[i]; {
	case c == '"':
		return endOfString(s, i)
	case c == '-' || c >= '0' && c <= '9':
		return endOfNumber(s, i)
	case c == 't':
		if !hasLiteral(s, i, "true") {
			return -1
		}
		return i + 4
	case c == 'f':
		if !hasLiteral(s, i, "false") {
			return -1
		}
		return i + 5
	case c == 'n':
		if !hasLiteral(s, i, "null") {
			return -1
		}
		return i + 4
	}
	return -1
}

// maxJSONDepth is encoding/json's nesting limit, which Valid enforces too.
const maxJSONDepth = 10000

func closer(open byte) byte {
	if open == '{' {
		return '}'
	}
	return ']'
}

func isJSONSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r'
}

func skipWS(s []byte, i int) int {
	for i < len(s) && isJSONSpace(s[i]) {
		i++
	}
	return i
}

// objectKey reads `"key" :` at i (after whitespace) and returns where the
// member's value starts, or -1.
func objectKey(s []byte, i int) int {
	if i >= len(s) || s[i] != '"' {
		return -1
	}
	if i = endOfString(s, i); i < 0 {
		return -1
	}
	i = skipWS(s, i)
	if i >= len(s) || s[i] != ':' {
		return -1
	}
	return skipWS(s, i+1)
}

// endOfString returns the index after the string that starts at s[i]
// ('"'), or -1. As encoding/json's scanner, it checks the escapes and
// refuses control characters, and does not check UTF-8 (Postgres text
// is valid UTF-8; the decoder's client_encoding is pinned to UTF8).
func endOfString(s []byte, i int) int {
	for i++; i < len(s); i++ {
		if !stringStop[s[i]] {
			continue
		}
		switch c := s[i]; {
		case c == '"':
			return i + 1
		case c < 0x20:
			return -1
		default: // '\\'
			i++
			if i >= len(s) {
				return -1
			}
			switch s[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(s) {
					return -1
				}
				for _, h := range s[i+1 : i+5] {
					if _, ok := Unhex(h); !ok {
						return -1
					}
				}
				i += 4
			default:
				return -1
			}
		}
	}
	return -1
}

// stringStop marks the bytes a JSON string cannot hold as they are: the
// quote that ends it, the backslash of an escape, control characters.
var stringStop = func() (t [256]bool) {
	for c := 0; c < 0x20; c++ {
		t[c] = true
	}
	t['"'], t['\\'] = true, true
	return t
}()

// endOfNumber returns the index after the number that starts at s[i], or
// -1: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func endOfNumber(s []byte, i int) int {
	if s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		i = digits(s, i+1)
	default:
		return -1
	}
	if i < len(s) && s[i] == '.' {
		j := digits(s, i+1)
		if j == i+1 {
			return -1
		}
		i = j
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		j := digits(s, i)
		if j == i {
			return -1
		}
		i = j
	}
	return i
}

func digits(s []byte, i int) int {
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}

func hasLiteral(s []byte, i int, lit string) bool {
	return len(s)-i >= len(lit) && string(s[i:i+len(lit)]) == lit
}
