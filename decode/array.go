package decode

import "fmt"

// arrayEncoder reads a one-dimensional Postgres array in text form
// ({a,"b c",NULL}) and writes a JSON array of inner's encodings.
// Multi-dimensional arrays and explicit bounds are refused.
func arrayEncoder(inner Encoder) Encoder {
	return func(dst, s []byte) ([]byte, error) {
		if len(s) < 2 || s[0] != '{' || s[len(s)-1] != '}' {
			return dst, fmt.Errorf("array %q is not a one-dimensional array with default bounds", clip(s))
		}
		body := s[1 : len(s)-1]
		dst = append(dst, '[')
		if len(body) == 0 {
			return append(dst, ']'), nil
		}
		var elem []byte
		for i, n := 0, 0; ; n++ {
			if i >= len(body) {
				return dst, fmt.Errorf("array %q: missing element", clip(s))
			}
			if n > 0 {
				dst = append(dst, ',')
			}
			elem = elem[:0]
			switch body[i] {
			case '{':
				return dst, fmt.Errorf("multi-dimensional array %q is not supported", clip(s))
			case '"':
				i++
				closed := false
				for i < len(body) {
					c := body[i]
					if c == '\\' && i+1 < len(body) {
						elem = append(elem, body[i+1])
						i += 2
						continue
					}
					i++
					if c == '"' {
						closed = true
						break
					}
					elem = append(elem, c)
				}
				if !closed {
					return dst, fmt.Errorf("array %q: unterminated quoted element", clip(s))
				}
				var err error
				if dst, err = inner(dst, elem); err != nil {
					return dst, fmt.Errorf("array element %d: %w", n+1, err)
				}
			default:
				start := i
				for i < len(body) && body[i] != ',' {
					if body[i] == '"' || body[i] == '{' || body[i] == '\\' {
						return dst, fmt.Errorf("array %q: unexpected %q in element", clip(s), body[i])
					}
					i++
				}
				tok := body[start:i]
				if string(tok) == "NULL" {
					dst = append(dst, "null"...)
				} else {
					var err error
					if dst, err = inner(dst, tok); err != nil {
						return dst, fmt.Errorf("array element %d: %w", n+1, err)
					}
				}
			}
			if i == len(body) {
				return append(dst, ']'), nil
			}
			if body[i] != ',' {
				return dst, fmt.Errorf("array %q: expected ',' after element %d", clip(s), n+1)
			}
			i++
		}
	}
}

func clip(s []byte) string {
	if len(s) > 64 {
		return string(s[:64]) + "…"
	}
	return string(s)
}
