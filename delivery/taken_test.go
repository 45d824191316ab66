package delivery

import (
	"strings"
	"testing"
)

// Taken follows Feldera's per-table count from one read and the answered
// requests; a request without an answer makes its table unknown, and a
// read that disagrees names the table another client posted to.
func TestTaken(t *testing.T) {
	for _, c := range []struct {
		name    string
		steps   func(k *Taken)
		table   string
		want    uint64
		known   bool
		checkOK bool // a /stats read of {"a": 12, "b": 1} agrees
	}{
		{"none read", func(k *Taken) {}, "a", 0, false, true},
		{"read", func(k *Taken) { k.Read("i1", map[string]uint64{"a": 10, "b": 1}) }, "a", 10, true, false},
		{"read, then answered", func(k *Taken) {
			k.Read("i1", map[string]uint64{"a": 10, "b": 1})
			k.answered("a", []byte("{\"insert\":{}}\n{\"delete\":{}}\n"))
		}, "a", 12, true, true},
		{"a table never posted to counts 0", func(k *Taken) { k.Read("i1", map[string]uint64{"b": 1}) }, "a", 0, true, false},
		{"failed", func(k *Taken) {
			k.Read("i1", map[string]uint64{"a": 10, "b": 1})
			k.failed("a")
		}, "a", 0, false, true},
		{"reset", func(k *Taken) {
			k.Read("i1", map[string]uint64{"a": 10})
			k.Reset()
		}, "a", 0, false, true},
		{"read again after a failure", func(k *Taken) {
			k.Read("i1", map[string]uint64{"a": 10, "b": 1})
			k.failed("a")
			k.Read("i1", map[string]uint64{"a": 12, "b": 1})
		}, "a", 12, true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var k Taken
			c.steps(&k)
			n, inc, ok := k.Of(c.table)
			if ok != c.known || n != c.want || ok && inc != "i1" {
				t.Fatalf("Of(%q) = %d, %q, %v; want %d, i1, %v", c.table, n, inc, ok, c.want, c.known)
			}
			err := k.Check("i1", map[string]uint64{"a": 12, "b": 1}, map[string]bool{"a": true, "b": true})
			if (err == nil) != c.checkOK {
				t.Fatalf("Check: %v, want agreement %v", err, c.checkOK)
			}
			if err != nil {
				if !strings.Contains(err.Error(), "table a") {
					t.Fatalf("Check's error does not name table a: %v", err)
				}
				if _, _, ok := k.Of("a"); ok {
					t.Fatal("a table Check found another client's records in stays known")
				}
			}
		})
	}
}

// Skip hands out each table's records once, across batches, and names
// what the replay never met.
func TestSkip(t *testing.T) {
	s := Skip{"a": 5, "b": 2}
	for _, c := range []struct {
		table       string
		lines, want int
	}{{"a", 3, 3}, {"b", 1, 1}, {"a", 4, 2}, {"a", 4, 0}, {"c", 9, 0}} {
		if got := s.Of(c.table, c.lines); got != c.want {
			t.Fatalf("Of(%s, %d) = %d, want %d", c.table, c.lines, got, c.want)
		}
	}
	if err := s.Rest(); err == nil || !strings.Contains(err.Error(), "1 more records of table b") {
		t.Fatalf("Rest = %v, want table b's record named", err)
	}
	s.Of("b", 1)
	if err := s.Rest(); err != nil {
		t.Fatalf("Rest = %v once everything was met", err)
	}
	var none Skip
	if none.Of("a", 3) != 0 || none.Rest() != nil {
		t.Fatal("a nil Skip skips something")
	}
}
