package pgvalue

import (
	"errors"
	"fmt"
)

// arrayEncoder reads a Postgres array in text form ({a,"b c",NULL},
// {{1,2},{3,4}}) and writes nested JSON arrays of inner's encodings. dims
// is the number of dimensions the Feldera type has (T ARRAY ARRAY is 2);
// 0 takes any (VARIANT). A value of other dimensions, and explicit bounds
// ([0:1]={…}), are refused: they have no faithful form in that column.
// A NaN element becomes null, as a NaN in a nullable column does.
func arrayEncoder(inner Encoder, dims int) Encoder {
	return func(dst, s []byte) ([]byte, error) {
		if len(s) < 2 || s[0] != '{' || s[len(s)-1] != '}' {
			return dst, fmt.Errorf("array %q has explicit bounds or is not an array", clip(s))
		}
		p := arrayParser{s: s, inner: inner}
		dst, err := p.array(dst, dims)
		if err == nil && p.i != len(s) {
			err = fmt.Errorf("array %q: trailing characters", clip(s))
		}
		return dst, err
	}
}

type arrayParser struct {
	s     []byte
	i     int
	inner Encoder
	elem  []byte
	n     int // elements read, for messages
}

// array reads {…} at p.i with want dimensions (0: any) into dst.
func (p *arrayParser) array(dst []byte, want int) ([]byte, error) {
	s := p.s
	p.i++ // '{'
	dst = append(dst, '[')
	if p.i < len(s) && s[p.i] == '}' {
		p.i++
		return append(dst, ']'), nil
	}
	for k := 0; ; k++ {
		if p.i >= len(s) {
			return dst, fmt.Errorf("array %q: missing element", clip(s))
		}
		if k > 0 {
			dst = append(dst, ',')
		}
		var err error
		switch c := s[p.i]; {
		case c == '{':
			if want == 1 {
				return dst, fmt.Errorf("array %q has more dimensions than the Feldera column type", clip(s))
			}
			next := 0
			if want > 1 {
				next = want - 1
			}
			dst, err = p.array(dst, next)
		case want > 1:
			return dst, fmt.Errorf("array %q has fewer dimensions than the Feldera column type (%d)", clip(s), want)
		default:
			dst, err = p.scalar(dst)
		}
		if err != nil {
			return dst, err
		}
		if p.i >= len(s) {
			return dst, fmt.Errorf("array %q: unterminated", clip(s))
		}
		switch s[p.i] {
		case ',':
			p.i++
		case '}':
			p.i++
			return append(dst, ']'), nil
		default:
			return dst, fmt.Errorf("array %q: expected ',' after element %d", clip(s), p.n)
		}
	}
}

func (p *arrayParser) scalar(dst []byte) ([]byte, error) {
	s := p.s
	p.n++
	p.elem = p.elem[:0]
	if s[p.i] == '"' {
		p.i++
		closed := false
		for p.i < len(s) {
			c := s[p.i]
			if c == '\\' && p.i+1 < len(s) {
				p.elem = append(p.elem, s[p.i+1])
				p.i += 2
				continue
			}
			p.i++
			if c == '"' {
				closed = true
				break
			}
			p.elem = append(p.elem, c)
		}
		if !closed {
			return dst, fmt.Errorf("array %q: unterminated quoted element", clip(s))
		}
		return p.encode(dst)
	}
	start := p.i
	for p.i < len(s) && s[p.i] != ',' && s[p.i] != '}' {
		if c := s[p.i]; c == '"' || c == '{' || c == '\\' {
			return dst, fmt.Errorf("array %q: unexpected %q in element", clip(s), c)
		}
		p.i++
	}
	tok := s[start:p.i]
	if string(tok) == "NULL" {
		return append(dst, "null"...), nil
	}
	p.elem = append(p.elem, tok...)
	return p.encode(dst)
}

func (p *arrayParser) encode(dst []byte) ([]byte, error) {
	mark := len(dst)
	out, err := p.inner(dst, p.elem)
	if err != nil {
		var u *Unrepresentable
		if errors.As(err, &u) && u.NaN {
			return append(dst[:mark], "null"...), nil
		}
		return dst[:mark], fmt.Errorf("array element %d: %w", p.n, err)
	}
	return out, nil
}

func clip(s []byte) string {
	if len(s) > 64 {
		return string(s[:64]) + "…"
	}
	return string(s)
}
