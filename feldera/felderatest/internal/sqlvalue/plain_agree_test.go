package sqlvalue

import (
	"bytes"
	"testing"

	"github.com/pgfeldera/pgfeldera/feldera"
)

// The fast paths of the double's parser answer exactly as encoding/json's
// path does, wherever they answer at all.

// FuzzNormalize: a value normPlain takes is one normalizeAny returns
// unchanged, without error.
func FuzzNormalize(f *testing.F) {
	for _, s := range []string{`1`, `-1`, `0`, `-0`, `+5`, `007`, `127`, `128`, `-129`, `255`, `256`, `18446744073709551615`,
		`9223372036854775808`, `"x"`, `"é"`, `"<"`, `"a\"b"`, `null`, ` 1`, `1.0`, `1e2`} {
		f.Add([]byte(s))
	}
	types := []string{"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT", "VARCHAR", "CHAR"}
	f.Fuzz(func(t *testing.T, raw []byte) {
		for _, typ := range types {
			ct := feldera.ColumnType{Type: typ, Nullable: true}
			fast, ok := normPlain(ct, raw)
			if !ok {
				continue
			}
			slow, err := normalizeAny(ct, raw)
			if err != nil || !bytes.Equal(fast, slow) {
				t.Fatalf("%s %q: fast path %q, encoding/json's path %q (%v)", typ, raw, fast, slow, err)
			}
		}
	})
}
