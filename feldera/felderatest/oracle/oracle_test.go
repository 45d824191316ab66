package oracle

import "testing"

// Rows are equal when their kept fields hold equal JSON values, whatever
// the key order, whitespace and string escapes; numbers compare by their
// exact text, so a lost scale is a difference.
func TestCanon(t *testing.T) {
	keep := map[string]bool{"id": true, "name": true, "n": true}
	for _, c := range []struct {
		a, b string
		same bool
	}{
		{`{"id": 1, "name": "x"}`, `{"name":"x","id":1}`, true},
		{`{"id":1,"name":"caf\u00e9"}`, `{"id":1,"name":"café"}`, true},
		{`{"id":1,"name":"x","dropped":true}`, `{"id":1,"name":"x"}`, true},
		{`{"id":1,"n":1.50}`, `{"id":1,"n":1.5}`, false},
		{`{"id":1,"n":null}`, `{"id":1}`, false},
		{`{"id":1,"n":[1, {"b":2,"a":1}]}`, `{"id":1,"n":[1,{"a":1,"b":2}]}`, true},
		{`{"id":1,"name":"x"}`, `{"id":2,"name":"x"}`, false},
	} {
		a, err := canon([]byte(c.a), keep)
		if err != nil {
			t.Fatal(err)
		}
		b, err := canon([]byte(c.b), keep)
		if err != nil {
			t.Fatal(err)
		}
		if (a == b) != c.same {
			t.Errorf("%s vs %s: canon %s and %s, want same=%v", c.a, c.b, a, b, c.same)
		}
	}
	if _, err := canon([]byte(`{"id":`), nil); err == nil {
		t.Error("a truncated row was accepted")
	}
}
