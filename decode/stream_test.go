package decode_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/decode"
	"github.com/pgfeldera/pgfeldera/decode/pgvalue"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
	"github.com/pgfeldera/pgfeldera/internal/pgoutputtest"
)

// The pgoutput builders are pgoutputtest's, shared with the connector's
// scripted replication source.
type msg = pgoutputtest.Msg

type col struct {
	name string
	oid  uint32
	key  bool
}

func relationMsg(id uint32, ns, name string, ident byte, cols ...col) []byte {
	cs := make([]pgoutputtest.Col, len(cols))
	for i, c := range cols {
		cs[i] = pgoutputtest.Col{Name: c.name, OID: c.oid, Key: c.key}
	}
	return pgoutputtest.Relation(id, ns, name, ident, cs...)
}

const null, toast = pgoutputtest.Null, pgoutputtest.Toast

var (
	insertMsg = pgoutputtest.Insert
	deleteMsg = pgoutputtest.Delete
	updateMsg = pgoutputtest.Update
)

type bufs map[int]*[]byte

func (b bufs) Buffer(route int) *[]byte {
	if b[route] == nil {
		b[route] = new([]byte)
	}
	return b[route]
}

func newDecoder(t testing.TB) *decode.Decoder {
	rels := felderatest.MustParseDDL(`
CREATE TABLE users (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR, big VARCHAR);
CREATE TABLE catalog_items (sku INT NOT NULL, region VARCHAR NOT NULL, price DECIMAL(10,2), PRIMARY KEY (sku, region));
CREATE TABLE loose (a INT, b VARCHAR);`)
	return decode.NewDecoder([]*decode.Target{
		{Schema: "public", Name: "users", Route: 0, Dest: rels[0]},
		{Schema: "public", Name: "items", Route: 1, Dest: rels[1]},
		{Schema: "public", Name: "loose", Route: 2, Dest: rels[2]},
	})
}

var usersCols = []col{{"id", pgvalue.OIDInt8, true}, {"name", pgvalue.OIDText, false}, {"big", pgvalue.OIDText, false}}

func run(t *testing.T, d *decode.Decoder, b bufs, msgs ...[]byte) error {
	t.Helper()
	var ev decode.Event
	for _, m := range msgs {
		if err := d.Decode(m, b, &ev); err != nil {
			return err
		}
	}
	return nil
}

func TestDecoder_InsertUpdateDelete(t *testing.T) {
	d := newDecoder(t)
	b := bufs{}
	err := run(t, d, b,
		relationMsg(10, "public", "users", 'd', usersCols...),
		insertMsg(10, "1", "ann", null),
		updateMsg(10, 0, nil, "1", "ann2", "x"),                          // key unchanged: upsert
		updateMsg(10, 'K', []string{"1", null, null}, "99", "ann3", "y"), // key changed
		deleteMsg(10, 'K', "99", null, null),
	)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"insert":{"id":1,"name":"ann","big":null}}
{"insert":{"id":1,"name":"ann2","big":"x"}}
{"delete":{"id":1}}
{"insert":{"id":99,"name":"ann3","big":"y"}}
{"delete":{"id":99}}
`
	if got := string(*b[0]); got != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
}

func TestDecoder_CompositeKeyFullIdentity(t *testing.T) {
	d := newDecoder(t)
	b := bufs{}
	cols := []col{{"sku", pgvalue.OIDInt4, true}, {"region", pgvalue.OIDText, true}, {"price", pgvalue.OIDNumeric, true}, {"extra", pgvalue.OIDText, true}}
	err := run(t, d, b,
		relationMsg(11, "public", "items", 'f', cols...),
		updateMsg(11, 'O', []string{"1", "eu", "9.99", "x"}, "1", "us", "9.99", "x"),
	)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"delete":{"sku":1,"region":"eu"}}
{"insert":{"sku":1,"region":"us","price":"9.99"}}
`
	if got := string(*b[1]); got != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
}

func TestDecoder_Toast(t *testing.T) {
	d := newDecoder(t)
	b := bufs{}
	// FULL: the old tuple fills the hole.
	err := run(t, d, b,
		relationMsg(10, "public", "users", 'f', usersCols...),
		updateMsg(10, 'O', []string{"1", "a", "BIG"}, "1", "b", toast))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(*b[0]), `{"insert":{"id":1,"name":"b","big":"BIG"}}`) {
		t.Fatalf("hole not filled: %s", *b[0])
	}
	// DEFAULT: refused, naming table and column, and the buffer is untouched.
	before := len(*b[0])
	err = run(t, d, b,
		relationMsg(10, "public", "users", 'd', usersCols...),
		updateMsg(10, 0, nil, "1", "c", toast))
	var re *decode.RefusalError
	if !errors.As(err, &re) || re.Table != "public.users" || re.Column != "big" {
		t.Fatalf("err = %v", err)
	}
	if len(*b[0]) != before {
		t.Fatal("a refused message left bytes in the buffer")
	}
}

func TestDecoder_Refusals(t *testing.T) {
	cases := map[string]struct {
		msgs [][]byte
		want string
	}{
		"unmapped":         {[][]byte{relationMsg(5, "public", "typed", 'd', col{"id", 23, true}), insertMsg(5, "1")}, "public.typed"},
		"unmappedTruncate": {[][]byte{relationMsg(5, "public", "typed", 'd', col{"id", 23, true}), msg{'T'}.U32(1).U8(0).U32(5)}, "public.typed"},
		"enum": {[][]byte{
			msg{'Y'}.U32(16500).Str("public").Str("mood"),
			relationMsg(10, "public", "users", 'd', col{"id", pgvalue.OIDInt8, true}, col{"name", 16500, false}),
		}, "public.mood"},
		// A Feldera key outside the replica identity is refused at the
		// RELATION, before any change: an UPDATE of it would send no old
		// row.
		"keyGap": {[][]byte{
			relationMsg(10, "public", "users", 'd', col{"id", pgvalue.OIDInt8, false}, col{"name", pgvalue.OIDText, true}),
		}, "replica identity of public.users (DEFAULT: name) does not carry id"},
		"keylessRefusedByDefault": {[][]byte{relationMsg(12, "public", "loose", 'f', col{"a", 23, true}, col{"b", 25, true})}, "no PRIMARY KEY"},
		"badPair":                 {[][]byte{relationMsg(10, "public", "users", 'd', col{"id", pgvalue.OIDInt8, true}, col{"name", pgvalue.OIDBytea, false})}, "no faithful encoding"},
		"notNullMissing":          {[][]byte{relationMsg(11, "public", "items", 'd', col{"sku", 23, true})}, "region"},
		"beforeRelation":          {[][]byte{insertMsg(77, "1")}, "OID 77"},
		"columnCount":             {[][]byte{relationMsg(10, "public", "users", 'd', usersCols...), insertMsg(10, "1", "a", "b", "c")}, "4 columns"},
		// A retraction's old tuple one column short, or with its key an
		// unchanged TOAST value, would delete nothing in Feldera.
		"oldTupleShort": {[][]byte{relationMsg(10, "public", "users", 'f', usersCols...), deleteMsg(10, 'O', "1", "a")}, "old tuple has 2 columns, relation has 3"},
		"oldKeyToast":   {[][]byte{relationMsg(10, "public", "users", 'f', usersCols...), deleteMsg(10, 'O', toast, "a", "b")}, "does not carry this Feldera key field"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			err := run(t, newDecoder(t), bufs{}, c.msgs...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want mention of %q", err, c.want)
			}
		})
	}
}

// A keyless Feldera table (FELDERA_REQUIRE_PRIMARY_KEY=false) retracts by
// the whole old row: its source must be REPLICA IDENTITY FULL, checked at
// every RELATION (an ALTER TABLE mid-stream sends a new one), and an
// UPDATE that arrives without its old row anyway (a partition under a
// FULL root keeps its own identity) is refused, not applied as an insert
// that would leave the old row behind.
func TestDecoder_KeylessNeedsTheOldRow(t *testing.T) {
	looseCols := []col{{"a", 23, true}, {"b", 25, true}}
	for name, c := range map[string]struct {
		msgs [][]byte
		want string
	}{
		"identityDefault":   {[][]byte{relationMsg(12, "public", "loose", 'd', looseCols...)}, "REPLICA IDENTITY DEFAULT"},
		"updateWithoutOld":  {[][]byte{relationMsg(12, "public", "loose", 'f', looseCols...), updateMsg(12, 0, nil, "1", "x")}, "without its old row"},
		"deleteWithKeyOnly": {[][]byte{relationMsg(12, "public", "loose", 'f', looseCols...), deleteMsg(12, 'K', "1", null)}, "whole old row"},
	} {
		t.Run(name, func(t *testing.T) {
			d := newDecoder(t)
			d.RequirePrimaryKey = false
			b := bufs{}
			err := run(t, d, b, c.msgs...)
			var re *decode.RefusalError
			if !errors.As(err, &re) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want a refusal mentioning %q", err, c.want)
			}
			if b[2] != nil && len(*b[2]) != 0 {
				t.Fatalf("a refused change left bytes: %q", *b[2])
			}
		})
	}
	d := newDecoder(t)
	d.RequirePrimaryKey = false
	b := bufs{}
	if err := run(t, d, b, relationMsg(12, "public", "loose", 'f', looseCols...), updateMsg(12, 'O', []string{"1", "x"}, "1", "y")); err != nil {
		t.Fatalf("FULL with its old row: %v", err)
	}
}

// With publish_via_partition_root, pgoutput sends the RELATION of the leaf
// partition after its root's, though the rows carry the root's OID: an
// unmapped RELATION alone is no refusal.
func TestDecoder_UnmappedRelationWithoutChanges(t *testing.T) {
	d := newDecoder(t)
	b := bufs{}
	err := run(t, d, b,
		relationMsg(10, "public", "users", 'd', usersCols...),
		relationMsg(5, "public", "users_leaf", 'd', usersCols...),
		insertMsg(10, "1", "a", "b"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(*b[0]), `"id":1`) {
		t.Fatalf("buffer = %q", *b[0])
	}
}

func TestDecoder_AlterTableAddColumn(t *testing.T) {
	d := newDecoder(t)
	b := bufs{}
	err := run(t, d, b,
		relationMsg(10, "public", "users", 'd', usersCols[:2]...),
		insertMsg(10, "1", "a"),
		relationMsg(10, "public", "users", 'd', usersCols...),
		insertMsg(10, "2", "b", "c"),
	)
	if err != nil {
		t.Fatal(err)
	}
	if want := "{\"insert\":{\"id\":1,\"name\":\"a\"}}\n{\"insert\":{\"id\":2,\"name\":\"b\",\"big\":\"c\"}}\n"; string(*b[0]) != want {
		t.Fatalf("got %s", *b[0])
	}
}

func TestDecoder_DroppedColumnWarns(t *testing.T) {
	d := newDecoder(t)
	var ev decode.Event
	err := d.Decode(relationMsg(10, "public", "users", 'd', append(usersCols, col{"secret", 25, false})...), bufs{}, &ev)
	if err != nil || len(ev.Warnings) != 1 || !strings.Contains(ev.Warnings[0], "secret") {
		t.Fatalf("err=%v warnings=%v", err, ev.Warnings)
	}
}

func TestDecoder_BeginCommitTruncate(t *testing.T) {
	d := newDecoder(t)
	var ev decode.Event
	// 2024-01-02 03:04:05.000006 UTC, in microseconds from 2000-01-01.
	const us = 757_479_845_000_006
	at := time.Date(2024, 1, 2, 3, 4, 5, 6000, time.UTC)
	if err := d.Decode(msg{'B'}.U64(0x100).U64(us).U32(7), bufs{}, &ev); err != nil || ev.Kind != decode.KindBegin || ev.Begin.Xid != 7 || !ev.Begin.CommitTime.Equal(at) {
		t.Fatalf("begin: %v %+v", err, ev)
	}
	if err := d.Decode(msg{'C'}.U8(0).U64(0x100).U64(0x128).U64(us), bufs{}, &ev); err != nil || ev.Kind != decode.KindCommit || ev.Commit.EndLSN != 0x128 || !ev.Commit.CommitTime.Equal(at) {
		t.Fatalf("commit: %v %+v", err, ev)
	}
	d.Decode(relationMsg(10, "public", "users", 'd', usersCols...), bufs{}, &ev)
	if err := d.Decode(msg{'T'}.U32(1).U8(1).U32(10), bufs{}, &ev); err != nil || ev.Kind != decode.KindTruncate || !ev.Cascade || len(ev.Truncated) != 1 {
		t.Fatalf("truncate: %v %+v", err, ev)
	}
}

func TestCopyRow(t *testing.T) {
	d := newDecoder(t)
	var ev decode.Event
	if err := d.Decode(relationMsg(10, "public", "users", 'd', usersCols...), bufs{}, &ev); err != nil {
		t.Fatal(err)
	}
	c := decode.CopyRow{Rel: ev.Rel}
	out, err := c.AppendInsert(nil, []byte(`7	tab\there\\ \101\x42	\N`))
	if err != nil {
		t.Fatal(err)
	}
	if want := "{\"insert\":{\"id\":7,\"name\":\"tab\\there\\\\ AB\",\"big\":null}}\n"; string(out) != want {
		t.Fatalf("got %q want %q", out, want)
	}
}

// The key an incremental snapshot reconciles by is the same text whether
// the row came from COPY or from the stream, and unknown (never guessed)
// when a key column is NULL or an unchanged TOAST value.
func TestKeyText(t *testing.T) {
	d := newDecoder(t)
	var ev decode.Event
	if err := d.Decode(relationMsg(10, "public", "users", 'd', usersCols...), bufs{}, &ev); err != nil {
		t.Fatal(err)
	}
	rel := ev.Rel
	c := decode.CopyRow{Rel: rel}
	if _, err := c.AppendInsert(nil, []byte("7\tx\t\\N")); err != nil {
		t.Fatal(err)
	}
	b, ok := c.AppendKeyText(nil)
	fromCopy := string(b)
	if !ok || fromCopy != "7" {
		t.Fatalf("copy key %q %v, want \"7\" true", fromCopy, ok)
	}
	fromStream, ok := rel.KeyText([]decode.TupleCol{{Kind: decode.ColText, Data: []byte("7")}, {Kind: decode.ColText, Data: []byte("y")}, {Kind: decode.ColNull}})
	if !ok || fromStream != fromCopy {
		t.Fatalf("stream key %q %v, want %q true", fromStream, ok, fromCopy)
	}
	for _, kind := range []byte{decode.ColNull, decode.ColUnchangedToast} {
		if k, ok := rel.KeyText([]decode.TupleCol{{Kind: kind}}); ok {
			t.Fatalf("key column of kind %q: got key %q, want unknown", kind, k)
		}
	}
	if k, ok := rel.KeyText(nil); ok {
		t.Fatalf("empty tuple: got key %q, want unknown", k)
	}
}

// Event.Keys are the keys a change touches, only for routes WantKeys
// marks: an insert's new key, an update's old and new, a delete's old; a
// key the tuple cannot tell (unchanged TOAST) is KeyUnknown, never a guess.
func TestEventKeys(t *testing.T) {
	d := newDecoder(t)
	b := bufs{}
	var ev decode.Event
	if err := d.Decode(relationMsg(10, "public", "users", 'd', usersCols...), b, &ev); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		msg     []byte
		want    string
		unknown bool
	}{
		{"insert", insertMsg(10, "1", "a", null), "1", false},
		{"updateSameKey", updateMsg(10, 0, nil, "2", "b", null), "2", false},
		{"updateKeyChanged", updateMsg(10, 'K', []string{"3", null, null}, "4", "b", null), "3|4", false},
		{"delete", deleteMsg(10, 'K', "5", null, null), "5", false},
		{"toastKey", updateMsg(10, 'O', []string{"6", "a", null}, toast, "b", null), "6", true},
	}
	for _, want := range []bool{false, true} {
		if want {
			d.WantKeys = []bool{true}
		}
		for _, c := range cases {
			if err := d.Decode(c.msg, b, &ev); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			got := strings.Join(ev.Keys, "|")
			if !want {
				if got != "" || ev.KeyUnknown {
					t.Fatalf("%s without WantKeys: keys %q unknown %v, want none", c.name, got, ev.KeyUnknown)
				}
				continue
			}
			if got != c.want || ev.KeyUnknown != c.unknown {
				t.Fatalf("%s: keys %q unknown %v, want %q %v", c.name, got, ev.KeyUnknown, c.want, c.unknown)
			}
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(relationMsg(10, "public", "users", 'd', usersCols...))
	f.Add(insertMsg(10, "1", "a", null))
	f.Add(updateMsg(10, 'K', []string{"1", null, null}, "2", "b", toast))
	f.Add(updateMsg(10, 'O', []string{"1", "x", "y"}, "2", "b", toast))
	f.Add(deleteMsg(10, 'K', "1", null, null))
	f.Add([]byte(msg{'T'}.U32(1).U8(0).U32(10)))
	f.Add([]byte(msg{'B'}.U64(1).U64(0).U32(7)))
	f.Add([]byte(msg{'C'}.U8(0).U64(1).U64(2).U64(0)))
	f.Add([]byte(msg{'M'}.U8(1).U64(5).Str("pgfeldera").U32(2).Append("{}")))
	f.Add([]byte(msg{'Y'}.U32(16500).Str("public").Str("mood")))
	f.Fuzz(func(t *testing.T, data []byte) {
		d := newDecoder(t)
		b := bufs{}
		var ev decode.Event
		// Prime the cache so change messages reach the tuple code.
		_ = d.Decode(relationMsg(10, "public", "users", 'f', usersCols...), b, &ev)
		_ = d.Decode(data, b, &ev)
		for _, buf := range b {
			for _, line := range strings.Split(strings.TrimSuffix(string(*buf), "\n"), "\n") {
				if line != "" && !jsonValid([]byte(line)) {
					t.Fatalf("invalid line %q", line)
				}
			}
		}
	})
}

func FuzzCopyRow(f *testing.F) {
	f.Add([]byte("1\tname\t\\N"))
	f.Add([]byte("1\t\\x41\\101\\\\\t\\"))
	f.Fuzz(func(t *testing.T, line []byte) {
		d := newDecoder(t)
		var ev decode.Event
		if err := d.Decode(relationMsg(10, "public", "users", 'd', usersCols...), bufs{}, &ev); err != nil {
			t.Fatal(err)
		}
		c := decode.CopyRow{Rel: ev.Rel}
		out, err := c.AppendInsert(nil, line)
		if err == nil && !jsonValid(out) {
			t.Fatalf("invalid JSON %q", out)
		}
	})
}

// Logical messages (pg_logical_emit_message, with messages 'true'): the
// prefix and content, transactional or not; malformed ones are parse errors.
func TestDecoder_LogicalMessage(t *testing.T) {
	d := newDecoder(t)
	var ev decode.Event
	if err := d.Decode(msg{'M'}.U8(1).U64(0x16B3748).Str("pgfeldera").U32(5).Append(`{"a":`), bufs{}, &ev); err != nil {
		t.Fatal(err)
	}
	if ev.Kind != decode.KindMessage || !ev.Message.Transactional || ev.Message.LSN != 0x16B3748 || ev.Message.Prefix != "pgfeldera" || string(ev.Message.Content) != `{"a":` {
		t.Fatalf("event = %+v", ev)
	}
	if err := d.Decode(msg{'M'}.U8(0).U64(1).Str("other").U32(0), bufs{}, &ev); err != nil || ev.Message.Transactional || ev.Message.Prefix != "other" || len(ev.Message.Content) != 0 {
		t.Fatalf("non-transactional: %+v, %v", ev, err)
	}
	for name, m := range map[string][]byte{
		"short content": msg{'M'}.U8(1).U64(1).Str("p").U32(9).Append("abc"),
		"trailing":      msg{'M'}.U8(1).U64(1).Str("p").U32(1).Append("ab"),
		"flags":         msg{'M'}.U8(6).U64(1).Str("p").U32(0),
		"no prefix end": msg{'M'}.U8(1).U64(1).Append("p"),
	} {
		var pe *decode.ParseError
		if err := d.Decode(m, bufs{}, &ev); !errors.As(err, &pe) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}
