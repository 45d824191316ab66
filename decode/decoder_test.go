package decode_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/pgfeldera/pgfeldera/decode"
	"github.com/pgfeldera/pgfeldera/decode/pgvalue"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
)

func valuesDecoder(t *testing.T, opts decode.Options) *decode.Decoder {
	rels := felderatest.MustParseDDL(`CREATE TABLE v (id INT NOT NULL PRIMARY KEY, d DATE, f DOUBLE NOT NULL, g DOUBLE);`)
	d := decode.NewDecoder([]*decode.Target{{Schema: "public", Name: "v", Dest: rels[0]}})
	d.Options = opts
	var ev decode.Event
	if err := d.Decode(relationMsg(20, "public", "v", 'd', col{"id", 23, true}, col{"d", pgvalue.OIDDate, false}, col{"f", pgvalue.OIDFloat8, false}, col{"g", pgvalue.OIDFloat8, false}), bufs{}, &ev); err != nil {
		t.Fatal(err)
	}
	return d
}

// Values Feldera cannot hold: refused by default, naming the table, the
// column and the row's key; NaN into a nullable column is null; with
// NullUnrepresentable an infinite date is null too, and each is reported.
func TestDecoder_UnrepresentableValues(t *testing.T) {
	for _, c := range []struct {
		vals []string
		want []string
	}{
		{[]string{"7", "infinity", "1", "1"}, []string{"public.v column d", "row id=7", `"infinity"`, "UNREPRESENTABLE_VALUES=null"}},
		{[]string{"8", "0044-03-15 BC", "1", "1"}, []string{"column d", "row id=8", "BC"}},
		{[]string{"9", "10000-01-01", "1", "1"}, []string{"column d", "row id=9"}},
		{[]string{"10", "2024-01-01", "NaN", "1"}, []string{"column f", "row id=10", "NaN", "NOT NULL"}},
	} {
		err := run(t, valuesDecoder(t, decode.Options{}), bufs{}, insertMsg(20, c.vals...))
		var re *decode.RefusalError
		if !errors.As(err, &re) {
			t.Fatalf("%v: err = %v", c.vals, err)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q does not mention %q", err, w)
			}
		}
	}

	b := bufs{}
	if err := run(t, valuesDecoder(t, decode.Options{}), b, insertMsg(20, "1", "2024-01-01", "1.5", "NaN")); err != nil {
		t.Fatal(err)
	}
	if got, want := string(*b[0]), `{"insert":{"id":1,"d":"2024-01-01","f":1.5,"g":null}}`+"\n"; got != want {
		t.Fatalf("got %s want %s", got, want)
	}

	var nulled []string
	opts := decode.Options{NullUnrepresentable: true, OnNull: func(table, column string, err error) {
		nulled = append(nulled, table+"."+column+": "+err.Error())
	}}
	b = bufs{}
	if err := run(t, valuesDecoder(t, opts), b, insertMsg(20, "2", "-infinity", "2", "Infinity")); err != nil {
		t.Fatal(err)
	}
	if got, want := string(*b[0]), `{"insert":{"id":2,"d":null,"f":2,"g":null}}`+"\n"; got != want {
		t.Fatalf("got %s want %s", got, want)
	}
	if len(nulled) != 2 || !strings.Contains(nulled[0], "public.v.d") || !strings.Contains(nulled[0], "-infinity") {
		t.Fatalf("nulled = %q", nulled)
	}
	// Still refused where the column cannot hold NULL.
	if err := run(t, valuesDecoder(t, opts), bufs{}, insertMsg(20, "3", "2024-01-01", "NaN", "1")); err == nil || !strings.Contains(err.Error(), "row id=3") {
		t.Fatalf("err = %v", err)
	}
}

// A mapped column renamed or dropped mid-stream would NULL its Feldera
// field in every later upsert: refused, naming it. A type change re-plans
// (or is refused if it has no encoding); an added column is delivered.
func TestDecoder_SchemaChangeMidStream(t *testing.T) {
	renamed := []col{{"id", pgvalue.OIDInt8, true}, {"full_name", pgvalue.OIDText, false}, {"big", pgvalue.OIDText, false}}
	dropped := []col{{"id", pgvalue.OIDInt8, true}, {"big", pgvalue.OIDText, false}}
	for name, cols := range map[string][]col{"rename": renamed, "drop": dropped} {
		err := run(t, newDecoder(t), bufs{}, relationMsg(10, "public", "users", 'd', usersCols...), insertMsg(10, "1", "a", "b"),
			relationMsg(10, "public", "users", 'd', cols...))
		if err == nil || !strings.Contains(err.Error(), "column name") || !strings.Contains(err.Error(), "users.name") || !strings.Contains(err.Error(), "mid-stream") {
			t.Errorf("%s: err = %v", name, err)
		}
	}
	// The same columns on a session's first RELATION plan (with a warning):
	// there is no earlier plan in the stream to compare with.
	var ev decode.Event
	if err := newDecoder(t).Decode(relationMsg(10, "public", "users", 'd', renamed...), bufs{}, &ev); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(ev.Warnings, "\n"), "column name has no Postgres column") {
		t.Fatalf("warnings = %q", ev.Warnings)
	}
	// Type change text → int8 into VARCHAR: re-planned.
	b := bufs{}
	err := run(t, newDecoder(t), b, relationMsg(10, "public", "users", 'd', usersCols...),
		relationMsg(10, "public", "users", 'd', col{"id", pgvalue.OIDInt8, true}, col{"name", pgvalue.OIDInt8, false}, col{"big", pgvalue.OIDText, false}),
		insertMsg(10, "1", "42", "x"))
	if err != nil || string(*b[0]) != `{"insert":{"id":1,"name":"42","big":"x"}}`+"\n" {
		t.Fatalf("type change: %v %s", err, *b[0])
	}
	// Type change into one with no encoding: refused.
	err = run(t, newDecoder(t), bufs{}, relationMsg(10, "public", "users", 'd', usersCols...),
		relationMsg(10, "public", "users", 'd', col{"id", pgvalue.OIDInt8, true}, col{"name", pgvalue.OIDBytea, false}, col{"big", pgvalue.OIDText, false}))
	if err == nil || !strings.Contains(err.Error(), "column name") || !strings.Contains(err.Error(), "bytea") {
		t.Fatalf("err = %v", err)
	}
}

// STREAM ABORT on protocol v1 (seen from PostgreSQL 18) is parsed and
// ignored; other streamed or two-phase messages are refused; a truncated
// abort is a parse error.
func TestDecoder_StreamMessagesOnV1(t *testing.T) {
	d := newDecoder(t)
	var ev decode.Event
	if err := d.Decode(msg{'A'}.U32(700).U32(701), bufs{}, &ev); err != nil || ev.Kind != decode.KindOther {
		t.Fatalf("stream abort: %v %+v", err, ev)
	}
	var pe *decode.ParseError
	if err := d.Decode(msg{'A'}.U32(700), bufs{}, &ev); !errors.As(err, &pe) {
		t.Fatalf("short stream abort: %v", err)
	}
	for _, m := range []byte("SEcpbPKr") {
		err := d.Decode(msg{m}.U32(700), bufs{}, &ev)
		var re *decode.RefusalError
		if !errors.As(err, &re) || !strings.Contains(err.Error(), "streamed or two-phase") {
			t.Errorf("%q: err = %v", m, err)
		}
	}
}
