package verify

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/pgfeldera/pgfeldera/feldera"
)

func ct(typ string) feldera.ColumnType { return feldera.ColumnType{Type: typ, Nullable: true} }

func TestCanonical_SentAndPrintedFormsAgree(t *testing.T) {
	cases := []struct {
		typ          string
		sent, output string // what pgfeldera sends, what Feldera prints
	}{
		{"BIGINT", `42`, `42`},
		{"DECIMAL", `"12.50"`, `12.5`},
		{"DECIMAL", `"-0.00"`, `0`},
		{"DECIMAL", `"1234567890123456789012345.10"`, `"1234567890123456789012345.1"`},
		{"DOUBLE", `0.1`, `1e-1`},
		{"REAL", `1.10000002`, `1.1`},
		{"VARCHAR", `"a\"b"`, `"a\"b"`},
		{"CHAR", `"ab   "`, `"ab"`},
		{"UUID", `"A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"`, `"a0eebc999c0b4ef8bb6d6bb9bd380a11"`},
		{"DATE", `"2024-02-29"`, `"2024-02-29"`},
		{"TIME", `"12:34:56.500000"`, `"12:34:56.5"`},
		{"TIMESTAMP", `"2030-01-01 00:01:01"`, `"2030-01-01T00:01:01"`},
		{"TIMESTAMP", `"2030-01-01 00:01:01.120000"`, `"2030-01-01T00:01:01.12"`},
		{"TIMESTAMP_TZ", `"2030-01-01 02:01:01+02:00"`, `"2030-01-01T00:01:01Z"`},
		{"VARBINARY", `[222,173,190,239]`, `"deadbeef"`},
		{"VARIANT", `{"b":1,"a":[true,null]}`, `{"a":[true,null],"b":1}`},
		{"BOOLEAN", `null`, `null`},
	}
	for _, c := range cases {
		a, err := Canonical(ct(c.typ), json.RawMessage(c.sent))
		if err != nil {
			t.Fatalf("%s %s: %v", c.typ, c.sent, err)
		}
		b, err := Canonical(ct(c.typ), json.RawMessage(c.output))
		if err != nil {
			t.Fatalf("%s %s: %v", c.typ, c.output, err)
		}
		if a != b {
			t.Errorf("%s: sent %s → %s, printed %s → %s", c.typ, c.sent, a, c.output, b)
		}
	}
}

func TestCanonical_DifferentValuesDiffer(t *testing.T) {
	cases := []struct{ typ, a, b string }{
		{"BIGINT", `1`, `2`},
		{"DECIMAL", `"1.5"`, `"1.05"`},
		{"VARCHAR", `""`, `null`},
		{"VARCHAR", `"NULL"`, `null`},
		{"VARCHAR", `"a "`, `"a"`},
		{"TIMESTAMP", `"2030-01-01 00:01:01"`, `"2030-01-01 00:01:01.000001"`},
		{"VARBINARY", `[1]`, `[1,0]`},
		{"BOOLEAN", `true`, `false`},
	}
	for _, c := range cases {
		a, _ := Canonical(ct(c.typ), json.RawMessage(c.a))
		b, _ := Canonical(ct(c.typ), json.RawMessage(c.b))
		if a == b {
			t.Errorf("%s: %s and %s both canonicalise to %s", c.typ, c.a, c.b, a)
		}
	}
}

func TestCanonical_RejectsWrongKinds(t *testing.T) {
	for _, c := range []struct{ typ, raw string }{
		{"BIGINT", `1.5`}, {"BIGINT", `"x"`}, {"BOOLEAN", `"true"`}, {"DATE", `"2024-02-30"`},
		{"UUID", `"xyz"`}, {"TIMESTAMP", `"yesterday"`}, {"VARCHAR", `1`},
	} {
		if v, err := Canonical(ct(c.typ), json.RawMessage(c.raw)); err == nil {
			t.Errorf("%s %s: accepted as %s", c.typ, c.raw, v)
		}
	}
}

func keyedRel() feldera.Relation {
	return feldera.Relation{Name: "t", PrimaryKey: []string{"id"}, Fields: []feldera.Field{
		{Name: "id", ColumnType: feldera.ColumnType{Type: "BIGINT"}},
		{Name: "name", ColumnType: ct("VARCHAR")},
		{Name: "amount", ColumnType: ct("DECIMAL")},
	}}
}

// run feeds both sides (twice when they differ, as the caller of Table does).
func run(t *testing.T, rel feldera.Relation, pg, fel []string) Result {
	t.Helper()
	tab, err := New(rel)
	if err != nil {
		t.Fatal(err)
	}
	feed := func() {
		for _, l := range pg {
			if err := tab.AddPostgres([]byte(l)); err != nil {
				t.Fatal(err)
			}
		}
		for _, l := range fel {
			if err := tab.AddFeldera([]byte(l)); err != nil {
				t.Fatal(err)
			}
		}
	}
	feed()
	if !tab.Match() {
		tab.StartDiff()
		feed()
	}
	return tab.Result(5)
}

func TestTable_SameRowsInAnyOrderMatch(t *testing.T) {
	var pg, fel []string
	for i := 0; i < 1000; i++ {
		pg = append(pg, fmt.Sprintf(`{"insert":{"id":%d,"name":"n%d","amount":"%d.10"}}`, i, i, i))
		fel = append(fel, fmt.Sprintf(`{"amount":%d.1,"id":%d,"name":"n%d"}`, 999-i, 999-i, 999-i))
	}
	r := run(t, keyedRel(), pg, fel)
	if !r.Match || r.PostgresRows != 1000 || r.FelderaRows != 1000 || r.PostgresHash != r.FelderaHash {
		t.Fatalf("%+v", r)
	}
}

func TestTable_NamesPlantedDifferences(t *testing.T) {
	var pg, fel []string
	for i := 0; i < 1000; i++ {
		pg = append(pg, fmt.Sprintf(`{"insert":{"id":%d,"name":"n%d","amount":"1.00"}}`, i, i))
		switch i {
		case 17: // missing in Feldera
		case 400:
			fel = append(fel, fmt.Sprintf(`{"id":%d,"name":"changed","amount":1}`, i))
		default:
			fel = append(fel, fmt.Sprintf(`{"id":%d,"name":"n%d","amount":1}`, i, i))
		}
	}
	fel = append(fel, `{"id":5000,"name":"ghost","amount":null}`)
	r := run(t, keyedRel(), pg, fel)
	if r.Match {
		t.Fatalf("difference not seen: %+v", r)
	}
	got := fmt.Sprint(r.Differences)
	for _, want := range []string{"{id=17 missing in Feldera []}", "{id=400 values differ [name]}", "{id=5000 not in Postgres []}"} {
		if !strings.Contains(got, want) {
			t.Errorf("differences %s lack %s", got, want)
		}
	}
}

func TestTable_KeylessCountsCopies(t *testing.T) {
	rel := feldera.Relation{Name: "log", Fields: []feldera.Field{{Name: "msg", ColumnType: ct("VARCHAR")}}}
	pg := []string{`{"insert":{"msg":"a"}}`, `{"insert":{"msg":"a"}}`, `{"insert":{"msg":"b"}}`}
	fel := []string{`{"msg":"a"}`, `{"msg":"b"}`, `{"msg":"b"}`}
	r := run(t, rel, pg, fel)
	if r.Match || r.PostgresRows != r.FelderaRows {
		t.Fatalf("same count, different multiset: want a difference: %+v", r)
	}
	got := fmt.Sprint(r.Differences)
	if !strings.Contains(got, `msg="a" missing in Feldera (Postgres has 2, Feldera 1)`) || !strings.Contains(got, `msg="b" not in Postgres (Postgres has 1, Feldera 2)`) {
		t.Fatalf("differences: %s", got)
	}
}

func TestTable_CaseOfFieldNames(t *testing.T) {
	rel := feldera.Relation{Name: "t", PrimaryKey: []string{"id"}, Fields: []feldera.Field{
		{Name: "id", ColumnType: feldera.ColumnType{Type: "BIGINT"}},
		{Name: "Mixed", CaseSensitive: true, ColumnType: ct("VARCHAR")},
		{Name: "Folded", ColumnType: ct("VARCHAR")},
	}}
	r := run(t, rel, []string{`{"insert":{"id":1,"Mixed":"x","Folded":"y"}}`}, []string{`{"id":1,"Mixed":"x","folded":"y"}`})
	if !r.Match {
		t.Fatalf("%+v", r)
	}
	tab, _ := New(rel)
	if err := tab.AddFeldera([]byte(`{"id":1,"mixed":"x"}`)); err == nil || !strings.Contains(err.Error(), `"mixed"`) {
		t.Fatalf("case-sensitive field matched case-insensitively: %v", err)
	}
}

// A Feldera column that no Postgres column feeds holds its default: Only
// leaves it out, so it is neither a difference nor hidden.
func TestTable_OnlyMappedFields(t *testing.T) {
	rel := keyedRel()
	rel.Fields = append(rel.Fields, feldera.Field{Name: "origin", ColumnType: feldera.ColumnType{Type: "VARCHAR"}})
	pg := []string{`{"insert":{"id":1,"name":"a","amount":"1.00"}}`}
	fel := []string{`{"id":1,"name":"a","amount":1,"origin":"pg"}`}
	if r := run(t, rel, pg, fel); r.Match {
		t.Fatal("without Only, a defaulted Feldera-only column must differ (else the test proves nothing)")
	}
	tab, _ := New(rel)
	tab.Only([]string{"id", "name", "amount"})
	tab.AddPostgres([]byte(pg[0]))
	tab.AddFeldera([]byte(fel[0]))
	if r := tab.Result(5); !r.Match || fmt.Sprint(r.NotCompared) != "[origin]" {
		t.Fatalf("%+v", r)
	}
	// A real difference in a compared column is still seen.
	tab, _ = New(rel)
	tab.Only([]string{"id", "name", "amount"})
	tab.AddPostgres([]byte(pg[0]))
	tab.AddFeldera([]byte(`{"id":1,"name":"b","amount":1,"origin":"pg"}`))
	if tab.Match() {
		t.Fatal("a changed name was not seen")
	}
}
