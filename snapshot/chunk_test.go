package snapshot_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgfeldera/pgfeldera/catalog"
	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
	"github.com/pgfeldera/pgfeldera/snapshot"
)

func TestMain(m *testing.M) { pgcluster.Main(m) }

// The window keeps exactly the chunk rows whose key the stream did not
// touch between the watermarks; touches outside a window are not kept.
func TestWindow(t *testing.T) {
	var w snapshot.Window
	w.Touch("k1") // before the low watermark: the chunk read after it is newer
	w.Open()
	w.Touch("k2")
	w.Touch("k2")
	w.Touch("k3")
	w.Close()
	w.Touch("k4") // after the high watermark: it follows the chunk's rows in the outbox
	for key, keep := range map[string]bool{"k1": true, "k2": false, "k3": false, "k4": true, "k5": true} {
		if w.Keep(key) != keep {
			t.Errorf("Keep(%s) = %v, want %v", key, !keep, keep)
		}
	}
	if w.Touched() != 2 {
		t.Errorf("Touched = %d", w.Touched())
	}
	w.Open()
	if !w.Keep("k2") || w.Touched() != 0 {
		t.Error("Open did not forget the previous window")
	}
}

// A poisoned window says why until the next Open; outside a window
// nothing poisons it.
func TestWindow_Poison(t *testing.T) {
	var w snapshot.Window
	w.Poison("before")
	w.Open()
	if w.Poisoned() != "" {
		t.Fatalf("poisoned before the window: %q", w.Poisoned())
	}
	w.Poison("truncate")
	w.Poison("unknown key")
	w.Close()
	if w.Poisoned() != "truncate" {
		t.Fatalf("Poisoned = %q, want the first reason", w.Poisoned())
	}
	w.Open()
	if w.Poisoned() != "" {
		t.Fatal("Open did not clear the poison")
	}
}

// Recent finds a transaction the snapshot did not see that committed
// before the low watermark (in its xip list, or at or past its xmax), not
// one that committed after it nor one the snapshot saw, and forgets the
// oldest commits past its capacity.
func TestRecent(t *testing.T) {
	var r snapshot.Recent
	r.Add(100, 10)
	r.Add(101, 30)
	r.Add(95, 12)
	snap := func(xmax uint32, xip ...uint32) snapshot.TxSnapshot { return snapshot.TxSnapshot{Xmax: xmax, Xip: xip} }
	if x, ok := r.CommittedBefore(snap(200, 7, 101, 100), 20); !ok || x != 100 {
		t.Fatalf("CommittedBefore = %d %v, want 100 true", x, ok)
	}
	if _, ok := r.CommittedBefore(snap(200, 101, 7), 20); ok {
		t.Fatal("a commit after the watermark is harmless")
	}
	if _, ok := r.CommittedBefore(snap(102), 20); ok {
		t.Fatal("transactions the snapshot saw are harmless")
	}
	// 100 committed before the watermark and is past the snapshot's xmax
	// (its xid is newer than every xid that had completed): not listed in
	// xip, and invisible all the same.
	if x, ok := r.CommittedBefore(snap(100), 20); !ok || x != 100 {
		t.Fatalf("CommittedBefore(xmax 100) = %d %v, want 100 true", x, ok)
	}
	if _, ok := r.CommittedBefore(snapshot.TxSnapshot{}, 1<<40); ok {
		t.Fatal("no snapshot sees everything")
	}
	// Modulo 2^32: an xid just past a wrapped xmax is after it.
	var w snapshot.Recent
	w.Add(4294967280, 11)
	w.Add(3, 13)
	if x, ok := w.CommittedBefore(snap(4294967290), 14); !ok || x != 3 {
		t.Fatalf("CommittedBefore across wraparound = %d %v, want 3 true", x, ok)
	}
	for i := 0; i < snapshot.RecentCap; i++ {
		r.Add(uint32(1000+i), uint64(40+i))
	}
	if _, ok := r.CommittedBefore(snap(1<<31, 100, 101), 1<<40); ok {
		t.Fatal("commits past the capacity are still remembered")
	}
	if x, ok := r.CommittedBefore(snap(1<<31, 1000+snapshot.RecentCap-1), 1<<40); !ok || x != 1000+snapshot.RecentCap-1 {
		t.Fatal("the newest commit is forgotten")
	}
}

func TestParseSnapshot(t *testing.T) {
	for in, want := range map[string]string{"5:9:": "9:", "5:9:5,7": "9:5,7", "4294967301:4294967310:4294967301": "14:5"} {
		s, err := snapshot.ParseSnapshot(in)
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		var got []string
		for _, x := range s.Xip {
			got = append(got, strconv.FormatUint(uint64(x), 10))
		}
		if g := strconv.FormatUint(uint64(s.Xmax), 10) + ":" + strings.Join(got, ","); g != want {
			t.Errorf("ParseSnapshot(%s) = %s, want %s", in, g, want)
		}
	}
	for _, bad := range []string{"", "1:2", "1:2:x", "1:x:", "1:0:"} {
		if _, err := snapshot.ParseSnapshot(bad); err == nil {
			t.Errorf("ParseSnapshot(%q) accepted", bad)
		}
	}
	s, _ := snapshot.ParseSnapshot("5:9:6")
	for x, want := range map[uint32]bool{4: false, 5: false, 6: true, 8: false, 9: true, 10: true} {
		if s.Invisible(x) != want {
			t.Errorf("5:9:6 Invisible(%d) = %v", x, !want)
		}
	}
}

func TestChunkSQL_Errors(t *testing.T) {
	s := snapshot.Source{Table: `"public"."t"`}
	key := []catalog.KeyColumn{{Name: "id", Type: "bigint"}}
	for name, err := range map[string]error{
		"no key":     func() error { _, err := s.ChunkSQL([]string{"id"}, nil, nil, 10); return err }(),
		"bad after":  func() error { _, err := s.ChunkSQL([]string{"id"}, key, []string{"1", "2"}, 10); return err }(),
		"zero limit": func() error { _, err := s.ChunkSQL([]string{"id"}, key, nil, 0); return err }(),
	} {
		if err == nil || !strings.Contains(err.Error(), `"public"."t"`) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}

// Chunks of a table with a composite key (an integer and a text with
// quotes, backslashes and a mix of cases, whose collation order is not
// byte order) and a row filter, read one after another from the last key
// of the previous chunk: together exactly the filtered rows, each once.
func TestChunkSQL_PartitionsTheTable(t *testing.T) {
	pgcluster.EveryVersion(t)
	ctx := context.Background()
	conn := testConn(t)
	if _, err := conn.Exec(ctx, `CREATE TABLE t (a int, b text, v int, PRIMARY KEY (a, b));
		INSERT INTO t SELECT g % 7, (ARRAY['x', 'O''Brien', 'back\slash', 'Zed', 'zed', 'é', ''])[1 + g % 7] || (g / 49), g
		FROM generate_series(1, 1000) g ON CONFLICT DO NOTHING`); err != nil {
		t.Fatal(err)
	}
	var want int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM t WHERE v % 3 <> 0").Scan(&want); err != nil {
		t.Fatal(err)
	}
	s := snapshot.Source{Table: `"public"."t"`, Filter: "v % 3 <> 0"}
	key := []catalog.KeyColumn{{Name: "a", Type: "integer"}, {Name: "b", Type: "text"}}
	seen := map[string]bool{}
	chunks := readLane(t, conn, s, key, snapshot.Lane{}, seen)
	if len(seen) != want || chunks < want/37 {
		t.Fatalf("%d rows in %d chunks, want %d", len(seen), chunks, want)
	}
}

// readLane reads one lane chunk after chunk, each row once into seen.
func readLane(t *testing.T, conn *pgx.Conn, s snapshot.Source, key []catalog.KeyColumn, lane snapshot.Lane, seen map[string]bool) int {
	ctx := context.Background()
	var after []string
	chunks := 0
	for {
		sql, err := s.LaneChunkSQL([]string{key[0].Name, key[1].Name, "v"}, key, lane, after, 37)
		if err != nil {
			t.Fatal(err)
		}
		var last []string
		rows := 0
		_, err = conn.PgConn().CopyTo(ctx, &lines{fn: func(line string) {
			f := strings.Split(line, "\t")
			if seen[f[0]+"\t"+f[1]] {
				t.Errorf("row %q in two chunks", line)
			}
			seen[f[0]+"\t"+f[1]] = true
			last = []string{unescapeCopy(f[0]), unescapeCopy(f[1])}
			rows++
		}}, sql)
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		if rows == 0 {
			return chunks
		}
		chunks++
		after = last
	}
}

// Lanes cut at the histogram of a text first key column (collation order,
// quotes, backslashes) partition the table: read lane by lane, chunk by
// chunk, every row once; and the lanes are about even.
func TestLanes_PartitionTheTable(t *testing.T) {
	pgcluster.EveryVersion(t)
	ctx := context.Background()
	conn := testConn(t)
	if _, err := conn.Exec(ctx, `CREATE TABLE t (b text, a int, v int, PRIMARY KEY (b, a));
		INSERT INTO t SELECT (ARRAY['x', 'O''Brien', 'back\slash', 'Zed', 'zed', 'é', ''])[1 + g % 7] || (g % 500), g % 3, g
		FROM generate_series(1, 3000) g ON CONFLICT DO NOTHING;
		ANALYZE t`); err != nil {
		t.Fatal(err)
	}
	var want int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&want); err != nil {
		t.Fatal(err)
	}
	var bounds []string
	if err := conn.QueryRow(ctx, "SELECT histogram_bounds::text::text[] FROM pg_stats WHERE tablename = 't' AND attname = 'b'").Scan(&bounds); err != nil {
		t.Fatal(err)
	}
	lanes := snapshot.Lanes(bounds, 3)
	if len(lanes) != 3 || lanes[0].Lo != nil || lanes[2].Hi != nil || *lanes[0].Hi != *lanes[1].Lo {
		t.Fatalf("lanes %+v from %d bounds", lanes, len(bounds))
	}
	s := snapshot.Source{Table: `"public"."t"`}
	key := []catalog.KeyColumn{{Name: "b", Type: "text"}, {Name: "a", Type: "integer"}}
	seen := map[string]bool{}
	for _, l := range lanes {
		before := len(seen)
		readLane(t, conn, s, key, l, seen)
		if n := len(seen) - before; n < want/6 {
			t.Errorf("lane %+v holds %d of %d rows", l, n, want)
		}
	}
	if len(seen) != want {
		t.Fatalf("%d rows in the lanes, want %d", len(seen), want)
	}
	if got := snapshot.Lanes(nil, 4); len(got) != 1 || got[0].Lo != nil || got[0].Hi != nil {
		t.Fatalf("no histogram: %+v", got)
	}
	if got := snapshot.Lanes([]string{"a", "a", "a", "b"}, 4); len(got) != 2 {
		t.Fatalf("repeated bounds: %d lanes", len(got))
	}
}

// lines splits COPY output into lines.
type lines struct {
	fn      func(string)
	partial string
}

func (l *lines) Write(p []byte) (int, error) {
	all := l.partial + string(p)
	parts := strings.Split(all, "\n")
	for _, line := range parts[:len(parts)-1] {
		l.fn(line)
	}
	l.partial = parts[len(parts)-1]
	return len(p), nil
}

// unescapeCopy undoes COPY text format's backslash escapes (only \\ occurs here).
func unescapeCopy(s string) string { return strings.ReplaceAll(s, `\\`, `\`) }

// testConn is a connection to a fresh database, closed with the test.
func testConn(t *testing.T) *pgx.Conn {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgcluster.Shared(t).NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	return conn
}

func TestBlockChunkSQL(t *testing.T) {
	s := snapshot.Source{Table: `"public"."t"`, Filter: "(region = 'eu'::text)"}
	got, err := s.BlockChunkSQL([]string{"id", "Name"}, 10, 20)
	if err != nil {
		t.Fatal(err)
	}
	want := `COPY (SELECT "id", "Name" FROM "public"."t" WHERE ctid >= '(10,0)'::tid AND ctid < '(20,0)'::tid AND ((region = 'eu'::text))) TO STDOUT`
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	if _, err := s.BlockChunkSQL([]string{"id"}, 20, 10); err == nil {
		t.Fatal("a backwards range was accepted")
	}
}

// BlockLanes partitions [0, end): contiguous, no gap, no overlap, no
// empty lane but for an empty table's one.
func TestBlockLanes(t *testing.T) {
	for _, c := range []struct {
		end   uint32
		n     int
		lanes int
	}{{0, 3, 1}, {1, 3, 1}, {2, 3, 2}, {100, 1, 1}, {100, 3, 3}, {4294967295, 4, 4}} {
		got := snapshot.BlockLanes(c.end, c.n)
		if len(got) != c.lanes {
			t.Fatalf("BlockLanes(%d, %d) = %v, want %d lanes", c.end, c.n, got, c.lanes)
		}
		var at uint32
		for _, l := range got {
			if l[0] != at || (l[1] <= l[0] && c.end > 0) {
				t.Fatalf("BlockLanes(%d, %d) = %v: not a partition", c.end, c.n, got)
			}
			at = l[1]
		}
		if at != c.end {
			t.Fatalf("BlockLanes(%d, %d) = %v: ends at %d", c.end, c.n, got, at)
		}
	}
}

func TestBlocksPerChunk(t *testing.T) {
	for _, c := range []struct {
		rows, maxBytes              int
		rowsPerBlock, bytesPerBlock float64
		prev, want                  uint32
	}{
		{10000, 4 << 20, 0, 0, 0, 1},             // nothing read yet: one block first
		{10000, 4 << 20, 100, 0, 0, 1},           // an estimate of rows says nothing of their width
		{10000, 4 << 20, 0, 0, 8, 16},            // empty so far: twice the last
		{10000, 4 << 20, 0, 0, 1 << 20, 1 << 20}, // capped
		{10000, 4 << 20, 100, 8000, 1, 100},      // rows bound
		{10000, 4 << 20, 100, 1 << 20, 1, 4},     // bytes bound (TOASTed values)
		{10000, 4 << 20, 100, 64 << 20, 1, 1},    // one block holds more than the bound: still one
		{10000, 4 << 20, 0.001, 1, 1, 1 << 20},   // a nearly empty heap: capped
	} {
		if got := snapshot.BlocksPerChunk(c.rows, c.maxBytes, c.rowsPerBlock, c.bytesPerBlock, c.prev); got != c.want {
			t.Errorf("BlocksPerChunk(%d, %d, %v, %v, %d) = %d, want %d", c.rows, c.maxBytes, c.rowsPerBlock, c.bytesPerBlock, c.prev, got, c.want)
		}
	}
}
