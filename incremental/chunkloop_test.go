package incremental

import (
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"

	"github.com/pgfeldera/pgfeldera/snapshot"
)

// testChunk is chunk seq of route 0 with one NDJSON line per key.
func testChunk(seq uint64, xip []uint32, keys ...string) *Chunk {
	return testChunkSnap(seq, snapshot.TxSnapshot{Xmax: 1000, Xip: xip}, keys...)
}

func testChunkSnap(seq uint64, snap snapshot.TxSnapshot, keys ...string) *Chunk {
	ch := &Chunk{Seq: seq, Table: &Table{Idx: 0}, snap: snap, last: []string{keys[len(keys)-1]}}
	for _, k := range keys {
		ch.Buf = append(ch.Buf, `{"insert":{"id":`+k+`}}`+"\n"...)
		ch.Ends = append(ch.Ends, len(ch.Buf))
		ch.addKey([]byte(k))
	}
	return ch
}

func keptKeys(ch *Chunk) string {
	if ch == nil {
		return "<none>"
	}
	return strings.Join(ch.keyList(), ",")
}

// txn feeds one source transaction: BEGIN at final, changes to route 0
// with keys, COMMIT; it returns what the commit released.
func txn(l *Loop, xid uint32, final pglogrepl.LSN, keys ...string) *Chunk {
	l.Begin(xid, final)
	for _, k := range keys {
		l.Rows(0, []string{k}, false)
	}
	return l.Commit(final, final+8)
}

// The window keeps the chunk rows the stream did not change between the
// watermarks; the kept rows come out at the high watermark's commit, and
// the chunk is due once the acknowledged position reaches its end.
func TestChunkLoop_Window(t *testing.T) {
	l := NewLoop()
	txn(l, 10, 100, "2") // before L: the chunk read after it is newer
	l.Begin(11, 200)
	if err := l.Low(1, 0); err != nil {
		t.Fatal(err)
	}
	if l.Commit(200, 208) != nil {
		t.Fatal("the low watermark released rows")
	}
	txn(l, 12, 300, "3") // in the window: the stream wins
	l.Begin(13, 350)     // a change to another table's route
	l.Rows(1, []string{"4"}, false)
	l.Commit(350, 358)
	l.Begin(14, 400)
	why, err := l.High(1, testChunk(1, nil, "1", "2", "3", "4"), false)
	if err != nil || why != "" {
		t.Fatalf("high = %q, %v", why, err)
	}
	if got := l.Due(1 << 40); len(got) != 0 {
		t.Fatalf("due before the watermark's commit: %+v", got)
	}
	kept := l.Commit(400, 408)
	if keptKeys(kept) != "1,2,4" || string(kept.Buf) != `{"insert":{"id":1}}`+"\n"+`{"insert":{"id":2}}`+"\n"+`{"insert":{"id":4}}`+"\n" {
		t.Fatalf("kept %q (%q), want 1,2,4", keptKeys(kept), kept.Buf)
	}
	txn(l, 15, 500, "1") // after H: it follows the chunk's rows
	if got := l.Due(407); len(got) != 0 {
		t.Fatalf("due before the end of the watermark's transaction: %+v", got)
	}
	got := l.Due(408)
	if len(got) != 1 || got[0].Rows != 3 || got[0].LSN != 408 || got[0].Last[0] != "4" {
		t.Fatalf("due = %+v", got)
	}
	if len(l.Due(1<<40)) != 0 {
		t.Fatal("a chunk is due twice")
	}
}

// A chunk nothing touched is kept whole, without a copy; keepAll (the
// unsafe variant) keeps touched rows too.
func TestChunkLoop_KeepWholeAndKeepAll(t *testing.T) {
	for _, keepAll := range []bool{false, true} {
		l := NewLoop()
		l.Begin(1, 100)
		l.Low(1, 0)
		l.Commit(100, 108)
		want := "1,2"
		if keepAll {
			txn(l, 2, 150, "2")
		}
		ch := testChunk(1, nil, "1", "2")
		l.Begin(3, 200)
		if why, err := l.High(1, ch, keepAll); why != "" || err != nil {
			t.Fatalf("high = %q, %v", why, err)
		}
		kept := l.Commit(200, 208)
		if keptKeys(kept) != want || !keepAll && kept != ch {
			t.Fatalf("keepAll=%v: kept %s (same chunk: %v)", keepAll, keptKeys(kept), kept == ch)
		}
	}
}

// A chunk is read again (nothing held, nothing due) after a TRUNCATE of
// its table or a change whose key is unknown inside its window, and after
// an xip transaction that committed before the low watermark; an xip
// transaction that committed after it is harmless (its keys are dropped).
func TestChunkLoop_ReadAgain(t *testing.T) {
	cases := []struct {
		name    string
		between func(l *Loop)
		xip     []uint32
		want    string // in why; "" for no retry
		kept    string
		xmax    uint32 // the chunk snapshot's xmax (0: 1000)
	}{
		{"truncate", func(l *Loop) { l.Begin(20, 300); l.Truncated(0); l.Commit(300, 308) }, nil, "TRUNCATE", "", 0},
		{"truncateOtherTable", func(l *Loop) { l.Begin(20, 300); l.Truncated(1); l.Commit(300, 308) }, nil, "", "1,2", 0},
		{"unknownKey", func(l *Loop) { l.Begin(20, 300); l.Rows(0, nil, true); l.Commit(300, 308) }, nil, "key", "", 0},
		{"xipCommittedBeforeLow", func(l *Loop) {}, []uint32{10}, "transaction 10 committed before the low watermark", "", 0},
		{"xipCommittedAfterLow", func(l *Loop) { txn(l, 30, 300, "2") }, []uint32{30}, "", "1", 0},
		{"xipUnknown", func(l *Loop) {}, []uint32{99}, "", "1,2", 0},
		// Transaction 10 committed before L and is at the snapshot's
		// xmax: newer than every xid that had completed, so invisible
		// though not in xip (L's own xid was older). Read again.
		{"pastXmax", func(l *Loop) {}, nil, "transaction 10 committed before the low watermark", "", 10},
		{"belowXmax", func(l *Loop) {}, nil, "", "1,2", 11},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := NewLoop()
			txn(l, 10, 100, "7") // committed before L
			l.Begin(11, 200)
			l.Low(1, 0)
			l.Commit(200, 208)
			c.between(l)
			l.Begin(12, 400)
			xmax := c.xmax
			if xmax == 0 {
				xmax = 1000
			}
			why, err := l.High(1, testChunkSnap(1, snapshot.TxSnapshot{Xmax: xmax, Xip: c.xip}, "1", "2"), false)
			if err != nil {
				t.Fatal(err)
			}
			kept := l.Commit(400, 408)
			if c.want == "" {
				if why != "" || keptKeys(kept) != c.kept {
					t.Fatalf("why %q, kept %s; want no retry, kept %s", why, keptKeys(kept), c.kept)
				}
				return
			}
			if !strings.Contains(why, c.want) || kept != nil || len(l.Due(1<<40)) != 0 {
				t.Fatalf("why %q (want %q), kept %s, due %v", why, c.want, keptKeys(kept), l.saves)
			}
			// The next window starts clean.
			l.Begin(13, 500)
			l.Low(2, 0)
			l.Commit(500, 508)
			l.Begin(14, 600)
			if why, _ := l.High(2, testChunk(2, nil, "1", "2"), false); why != "" {
				t.Fatalf("the next window is still poisoned: %q", why)
			}
		})
	}
}

// Commits to any mapped table are remembered (a resnapshot request may
// start reading any of them at any moment), and only those: a
// transaction that changed no table (a watermark's) is not.
func TestChunkLoop_RecentForEveryTable(t *testing.T) {
	l := NewLoop()
	l.Begin(10, 100)
	l.Rows(1, []string{"x"}, false) // another route than the chunk's
	l.Commit(100, 108)
	l.Begin(9, 150) // changed nothing
	l.Commit(150, 158)
	l.Begin(11, 200)
	l.Low(1, 0)
	l.Commit(200, 208)
	l.Begin(12, 300)
	if why, _ := l.High(1, testChunk(1, []uint32{9}, "1"), false); why != "" {
		t.Fatalf("read again for a transaction that changed no table: %q", why)
	}
	l.Commit(300, 308)
	l.Begin(13, 400)
	l.Low(2, 0)
	l.Commit(400, 408)
	l.Begin(14, 500)
	if why, _ := l.High(2, testChunk(2, []uint32{10}, "1"), false); !strings.Contains(why, "transaction 10") {
		t.Fatalf("a commit to another table before L, in the xip, was not caught: %q", why)
	}
}

// Watermarks out of order are errors, never a guess.
func TestChunkLoop_OutOfOrder(t *testing.T) {
	l := NewLoop()
	if _, err := l.High(1, testChunk(1, nil, "1"), false); err == nil {
		t.Fatal("high without low accepted")
	}
	l.Low(1, 0)
	if err := l.Low(1, 0); err == nil {
		t.Fatal("a second low of the same chunk accepted")
	}
	if _, err := l.High(2, testChunk(2, nil, "1"), false); err == nil {
		t.Fatal("high of a chunk never opened accepted")
	}
	l.Low(3, 0)
	if _, err := l.High(3, nil, false); err == nil {
		t.Fatal("high without the chunk's rows accepted")
	}
	l.Low(4, 0)
	if _, err := l.High(4, testChunk(5, nil, "1"), false); err == nil {
		t.Fatal("the rows of another chunk accepted")
	}
}

// Lanes: several chunks open at once, each reconciled with its own window
// only (a change between one chunk's watermarks does not drop rows of a
// chunk whose window had closed, or not yet opened), and each recorded at
// its own high watermark's end, in stream order.
func TestChunkLoop_OverlappingWindows(t *testing.T) {
	l := NewLoop()
	txn := func(xid uint32, at pglogrepl.LSN, keys ...string) {
		l.Begin(xid, at)
		l.Rows(0, keys, false)
		l.Commit(at, at+8)
	}
	l.Begin(1, 100)
	l.Low(1, 0) // lane A: keys a1, a2
	l.Commit(100, 108)
	txn(2, 200, "a1", "b1") // in A's window only
	l.Begin(3, 300)
	l.Low(2, 0) // lane B: keys b1, b2
	l.Commit(300, 308)
	txn(4, 400, "a2", "b2") // in both windows
	l.Begin(5, 500)
	why, err := l.High(1, testChunk(1, nil, "a1", "a2"), false)
	if err != nil || why != "" {
		t.Fatal(why, err)
	}
	if k := keptKeys(l.Commit(500, 508)); k != "" {
		t.Fatalf("lane A kept %s; both its keys changed in its window", k)
	}
	txn(6, 600, "b1") // after A closed, in B's window
	l.Begin(7, 700)
	if why, err := l.High(2, testChunk(2, nil, "b1", "b2", "b3"), false); err != nil || why != "" {
		t.Fatal(why, err)
	}
	if k := keptKeys(l.Commit(700, 708)); k != "b3" {
		t.Fatalf("lane B kept %s, want b3", k)
	}
	if l.Watching(0) {
		t.Fatal("a window is still open")
	}
	due := l.Due(1 << 40)
	if len(due) != 2 || due[0].LSN != 508 || due[1].LSN != 708 {
		t.Fatalf("due %+v", due)
	}
}

// A chunk read ahead of one that is read again is dropped whole: nothing
// held, nothing recorded.
func TestChunkLoop_Discard(t *testing.T) {
	l := NewLoop()
	l.Begin(1, 100)
	l.Low(1, 0)
	l.Commit(100, 108)
	ch := testChunk(1, nil, "1")
	ch.Discard = true
	l.Begin(2, 200)
	why, err := l.High(1, ch, false)
	if err != nil || why == "" {
		t.Fatalf("high = %q, %v; want a reason", why, err)
	}
	if kept := l.Commit(200, 208); kept != nil || len(l.Due(1<<40)) != 0 {
		t.Fatalf("a discarded chunk was kept (%s) or recorded", keptKeys(kept))
	}
}
