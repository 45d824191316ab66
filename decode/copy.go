package decode

import (
	"bytes"
	"fmt"

	"github.com/pgfeldera/pgfeldera/decode/pgvalue"
)

// CopyRow decodes COPY ... TO STDOUT text-format rows of one relation into
// insert lines, with the same encoders as the stream. It reuses its scratch
// space and is not safe for concurrent use.
type CopyRow struct {
	Rel   *Rel
	cols  []TupleCol
	unesc []byte
}

// AppendInsert parses one COPY text line (without its newline) and appends
// {"insert":{...}}\n to dst.
func (c *CopyRow) AppendInsert(dst, line []byte) ([]byte, error) {
	if cap(c.unesc) < len(line) {
		c.unesc = make([]byte, 0, len(line)*2)
	}
	u := c.unesc[:0]
	c.cols = c.cols[:0]
	start := 0
	for i := 0; i <= len(line); i++ {
		if i < len(line) && line[i] != '\t' {
			continue
		}
		field := line[start:i]
		start = i + 1
		if len(field) == 2 && field[0] == '\\' && field[1] == 'N' {
			c.cols = append(c.cols, TupleCol{Kind: ColNull})
			continue
		}
		from := len(u)
		var err error
		if u, err = unescapeCopy(u, field); err != nil {
			return dst, &RefusalError{Table: c.Rel.Target.Qualified(), Reason: fmt.Sprintf("COPY field %d: %v", len(c.cols)+1, err)}
		}
		c.cols = append(c.cols, TupleCol{Kind: ColText, Data: u[from:len(u):len(u)]})
	}
	c.unesc = u
	return c.Rel.appendRow(dst, "insert", c.cols, nil, false)
}

// unescapeCopy undoes COPY text escaping: \b \f \n \r \t \v \\, \ooo
// (octal) and \xhh. The output never grows past the input, so slices of
// dst stay valid while it is filled.
func unescapeCopy(dst, s []byte) ([]byte, error) {
	for i := 0; i < len(s); i++ {
		// Runs without a backslash (most fields are one) are copied whole.
		j := bytes.IndexByte(s[i:], '\\')
		if j < 0 {
			return append(dst, s[i:]...), nil
		}
		dst = append(dst, s[i:i+j]...)
		i += j + 1
		if i >= len(s) {
			return dst, fmt.Errorf("trailing backslash")
		}
		switch e := s[i]; e {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'v':
			dst = append(dst, '\v')
		case 'x':
			v, n := 0, 0
			for n < 2 && i+1 < len(s) {
				h, ok := pgvalue.Unhex(s[i+1])
				if !ok {
					break
				}
				v = v<<4 | int(h)
				i++
				n++
			}
			if n == 0 {
				dst = append(dst, 'x')
			} else {
				dst = append(dst, byte(v))
			}
		case '0', '1', '2', '3', '4', '5', '6', '7':
			v := int(e - '0')
			for n := 1; n < 3 && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '7'; n++ {
				i++
				v = v<<3 | int(s[i]-'0')
			}
			dst = append(dst, byte(v))
		default:
			dst = append(dst, e)
		}
	}
	return dst, nil
}

// AppendKeyText appends the Feldera key of the row the last AppendInsert
// parsed to dst, in the form Rel.KeyText gives a stream tuple.
func (c *CopyRow) AppendKeyText(dst []byte) ([]byte, bool) { return c.Rel.AppendKeyText(dst, c.cols) }

// Col is column i of the row the last AppendInsert parsed, as Postgres
// printed it (unescaped); ok is false for a NULL or a missing column.
func (c *CopyRow) Col(i int) (string, bool) {
	if i < 0 || i >= len(c.cols) || c.cols[i].Kind != ColText {
		return "", false
	}
	return string(c.cols[i].Data), true
}
