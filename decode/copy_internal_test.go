package decode

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/pgfeldera/pgfeldera/decode/pgvalue"
)

// unescapeRef is the byte-at-a-time unescaping unescapeCopy replaced with
// a run-copying loop; the two must agree on every input.
func unescapeRef(dst, s []byte) ([]byte, bool) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' {
			dst = append(dst, c)
			continue
		}
		i++
		if i >= len(s) {
			return dst, false
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
	return dst, true
}

func TestUnescapeCopy_MatchesReference(t *testing.T) {
	alphabet := []byte(`\\\\\\abfnrtvx0123789AFaf gZ` + "\x00\xff")
	rng := rand.New(rand.NewPCG(1, 2))
	cases := [][]byte{nil, []byte(`\`), []byte(`abc\`), []byte(`\x`), []byte(`\x4`), []byte(`\x4g`), []byte(`\777`), []byte(`\08`), []byte(`plain`), []byte(`a\\b\tc\101\x42`)}
	for range 20000 {
		b := make([]byte, rng.IntN(24))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		cases = append(cases, b)
	}
	for _, c := range cases {
		want, ok := unescapeRef([]byte("pre"), c)
		got, err := unescapeCopy([]byte("pre"), c)
		if (err == nil) != ok || ok && !bytes.Equal(got, want) {
			t.Fatalf("unescape %q: got %q, %v; want %q, ok %v", c, got, err, want, ok)
		}
	}
}
