package jsonscan

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

var seeds = []string{
	`{}`, ` { } `, `{"a":1}`, `{"a":1,"a":2}`, `{"insert":{"id":1,"name":"x"}}`,
	`{"a":[1,2,{"b":null}],"c":true,"d":false,"e":-0.5e+10}`, `{"a\u0041":1}`, `{"a":"\u00e9\n\"x\""}`,
	`{"a":01}`, `{"a":1,}`, `{"a" 1}`, `{"a":1}x`, `[1]`, `{"a":"` + "\x01" + `"}`, `{"a":"\x"}`,
	`{"a":1.}`, `{"a":-}`, `{"a":tru}`, `{"a":"<&>"}`, `{"a":"é"}`, `{"a":"\u2028"}`, "{\"a\":\"\xff\"}",
	`{"a":{"b":{"c":[[],{}]}}}`, `{"a":1e5,"b":1E-5,"c":0}`, ``, `{`, `{"a":`,
	`{"a":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`, // deeper than encoding/json takes
	`{"a":` + strings.Repeat("[", 600) + strings.Repeat("]", 600) + `}`,     // deeper than jsonscan takes
}

// Object agrees with encoding/json wherever it answers: a valid object
// with plain keys is split, each member as json.Unmarshal sees it (last
// key wins); anything else is not ok.
func FuzzObject(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		members, ok := Object(raw, nil)
		var want map[string]json.RawMessage
		valid := json.Unmarshal(raw, &want) == nil && bytes.HasPrefix(bytes.TrimSpace(raw), []byte("{"))
		escapedKey := false
		if valid {
			// conservative: only then may a key hold an escape or bad
			// UTF-8, or a value nest deeper than jsonscan takes
			escapedKey = bytes.Contains(raw, []byte(`\`)) || !utf8.Valid(raw) ||
				bytes.Count(raw, []byte("["))+bytes.Count(raw, []byte("{")) >= maxDepth
		}
		switch {
		case ok && !valid:
			t.Fatalf("%q: split, but encoding/json refuses it", raw)
		case !ok && valid && !escapedKey:
			t.Fatalf("%q: valid with plain keys, yet not split", raw)
		case ok:
			got := map[string]json.RawMessage{}
			for _, m := range members {
				got[m.Key] = m.Value
			}
			if len(got) != len(want) {
				t.Fatalf("%q: %d keys, encoding/json %d", raw, len(got), len(want))
			}
			for k, v := range want {
				if !bytes.Equal(got[k], v) {
					t.Fatalf("%q: %s = %s, encoding/json %s", raw, k, got[k], v)
				}
			}
		}
		if n := Value(raw); n >= 0 && !json.Valid(raw[:n]) {
			t.Fatalf("%q: Value says %d bytes are valid JSON; they are not", raw, n)
		}
	})
}

// Plain holds only for strings encoding/json writes back byte for byte.
func FuzzPlain(f *testing.F) {
	for _, s := range []string{`"abc"`, `"é"`, `"<"`, `"\n"`, `"a\"b"`, "\"\xff\"", `"\u2028"`, `""`, `"`, `x`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !Plain(raw) {
			return
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			t.Fatalf("%q: plain, but not a JSON string: %v", raw, err)
		}
		again, _ := json.Marshal(s)
		if !bytes.Equal(again, raw) {
			t.Fatalf("%q: plain, but encodes again as %q", raw, again)
		}
	})
}
