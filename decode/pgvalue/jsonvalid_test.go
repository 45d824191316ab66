package pgvalue

import (
	"encoding/json"
	"strings"
	"testing"
)

var jsonCases = []string{
	``, ` `, `null`, `true`, `false`, `nul`, `truex`, `0`, `-0`, `01`, `-`, `1.`, `1.5`, `1e`, `1e+`, `1E-7`, `-12.5e10`, `.5`, `+1`,
	`""`, `"a"`, `"\"`, `"\\"`, `"\u00e9"`, `"\u00G9"`, `"\u12"`, `"\x"`, "\"\x01\"", "\"\x7f\xff\"", `"\/\b\f\n\r\t"`,
	`[]`, `[ ]`, `[1]`, `[1,]`, `[,1]`, `[1 2]`, `[[[]]]`, `[[]`, `]`, `{}`, `{ }`, `{"a":1}`, `{"a":1,}`, `{"a"}`, `{"a":}`,
	`{a:1}`, `{"a":1 "b":2}`, `{"a":{"b":[1,{"c":null}]}}`, ` {"k": 123, "v": "x123"} `, "\t[1]\r\n", `[1]x`, `{}{}`, `1 2`,
	`{"a":[1,2,{"b":"c"}],"d":-1.5e-3,"e":true,"f":false,"g":null}`, `[` + strings.Repeat(`"x",`, 100) + `1]`,
}

func TestValidJSONMatchesEncodingJSON(t *testing.T) {
	cases := append([]string{}, jsonCases...)
	// nesting at and past encoding/json's limit
	cases = append(cases, strings.Repeat("[", maxJSONDepth)+strings.Repeat("]", maxJSONDepth))
	cases = append(cases, strings.Repeat("[", maxJSONDepth+1)+strings.Repeat("]", maxJSONDepth+1))
	cases = append(cases, strings.Repeat(`{"a":`, 100)+"1"+strings.Repeat("}", 100))
	for _, c := range cases {
		if got, want := validJSON([]byte(c)), json.Valid([]byte(c)); got != want {
			t.Errorf("validJSON(%.40q) = %v, encoding/json.Valid says %v", c, got, want)
		}
	}
}

// FuzzValidJSON holds validJSON to encoding/json.Valid on any input.
func FuzzValidJSON(f *testing.F) {
	for _, c := range jsonCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := validJSON(b), json.Valid(b); got != want {
			t.Fatalf("validJSON(%q) = %v, encoding/json.Valid says %v", b, got, want)
		}
	})
}

// BenchmarkValidJSON: validJSON against encoding/json.Valid, side by
// side, on bench k's jsonb value and on a larger one.
func BenchmarkValidJSON(b *testing.B) {
	for _, v := range []struct{ name, json string }{
		{"bench-k-row", `{"k": 123456, "v": "payload"}`},
		{"nested", `{"k": 123456, "v": "x123456", "tags": ["a", "b"], "n": -1.5e3, "o": {"p": [true, false, null]}}`},
	} {
		in := []byte(v.json)
		b.Run(v.name+"/validJSON", func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			for i := 0; i < b.N; i++ {
				if !validJSON(in) {
					b.Fatal("invalid")
				}
			}
		})
		b.Run(v.name+"/encoding-json", func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			for i := 0; i < b.N; i++ {
				if !json.Valid(in) {
					b.Fatal("invalid")
				}
			}
		})
	}
}
