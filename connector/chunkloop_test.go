package connector

import (
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"

	"github.com/pgfeldera/pgfeldera/snapshot"
)

// testChunk is chunk seq of route 0 with one NDJSON line per key.
func testChunk(seq uint64, xip []uint32, keys ...string) *chunk {
	return testChunkSnap(seq, snapshot.TxSnapshot{Xmax: 1000, Xip: xip}, keys...)
}

func testChunkSnap(seq uint64, snap snapshot.TxSnapshot, keys ...string) *chunk {
	ch := &chunk{seq: seq, table: &chunkTable{idx: 0}, snap: snap, last: []string{keys[len(keys)-1]}}
	for _, k := range keys {
		ch.buf = append(ch.buf, `{"insert":{"id":`+k+`}}`+"\n"...)
		ch.ends = append(ch.ends, len(ch.buf))
		ch.addKey([]byte(k))
	}
	return ch
}

func keptKeys(ch *chunk) string {
	if ch == nil {
		return "<none>"
	}
	return strings.Join(ch.keyList(), ",")
}

// txn feeds one source transaction: BEGIN at final, changes to route 0
// with keys, COMMIT; it returns what the commit released.
func txn(l *chunkLoop, xid uint32, final pglogrepl.LSN, keys ...string) *chunk {
	l.begin(xid, final)
	for _, k := range keys {
		l.rows(0, []string{k}, false)
	}
	return l.commit(final, final+8)
}

// The window keeps the chunk rows the stream did not change between the
// watermarks; the kept rows come out at the high watermark's commit, and
// the chunk is due once the acknowledged position reaches its end.
func TestChunkLoop_Window(t *testing.T) {
	l := newChunkLoop()
	txn(l, 10, 100, "2") // before L: the chunk read after it is newer
	l.begin(11, 200)
	if err := l.low(1, 0); err != nil {
		t.Fatal(err)
	}
	if l.commit(200, 208) != nil {
		t.Fatal("the low watermark released rows")
	}
	txn(l, 12, 300, "3") // in the window: the stream wins
	l.begin(13, 350)     // a change to another table's route
	l.rows(1, []string{"4"}, false)
	l.commit(350, 358)
	l.begin(14, 400)
	why, err := l.high(1, testChunk(1, nil, "1", "2", "3", "4"), false)
	if err != nil || why != "" {
		t.Fatalf("high = %q, %v", why, err)
	}
	if got := l.due(1 << 40); len(got) != 0 {
		t.Fatalf("due before the watermark's commit: %+v", got)
	}
	kept := l.commit(400, 408)
	if keptKeys(kept) != "1,2,4" || string(kept.buf) != `{"insert":{"id":1}}`+"\n"+`{"insert":{"id":2}}`+"\n"+`{"insert":{"id":4}}`+"\n" {
		t.Fatalf("kept %q (%q), want 1,2,4", keptKeys(kept), kept.buf)
	}
	txn(l, 15, 500, "1") // after H: it follows the chunk's rows
	if got := l.due(407); len(got) != 0 {
		t.Fatalf("due before the end of the watermark's transaction: %+v", got)
	}
	got := l.due(408)
	if len(got) != 1 || got[0].rows != 3 || got[0].lsn != 408 || got[0].last[0] != "4" {
		t.Fatalf("due = %+v", got)
	}
	if len(l.due(1<<40)) != 0 {
		t.Fatal("a chunk is due twice")
	}
}

// A chunk nothing touched is kept whole, without a copy; keepAll (the
// unsafe variant) keeps touched rows too.
func TestChunkLoop_KeepWholeAndKeepAll(t *testing.T) {
	for _, keepAll := range []bool{false, true} {
		l := newChunkLoop()
		l.begin(1, 100)
		l.low(1, 0)
		l.commit(100, 108)
		want := "1,2"
		if keepAll {
			txn(l, 2, 150, "2")
		}
		ch := testChunk(1, nil, "1", "2")
		l.begin(3, 200)
		if why, err := l.high(1, ch, keepAll); why != "" || err != nil {
			t.Fatalf("high = %q, %v", why, err)
		}
		kept := l.commit(200, 208)
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
		between func(l *chunkLoop)
		xip     []uint32
		want    string // in why; "" for no retry
		kept    string
		xmax    uint32 // the chunk snapshot's xmax (0: 1000)
	}{
		{"truncate", func(l *chunkLoop) { l.begin(20, 300); l.truncated(0); l.commit(300, 308) }, nil, "TRUNCATE", "", 0},
		{"truncateOtherTable", func(l *chunkLoop) { l.begin(20, 300); l.truncated(1); l.commit(300, 308) }, nil, "", "1,2", 0},
		{"unknownKey", func(l *chunkLoop) { l.begin(20, 300); l.rows(0, nil, true); l.commit(300, 308) }, nil, "key", "", 0},
		{"xipCommittedBeforeLow", func(l *chunkLoop) {}, []uint32{10}, "transaction 10 committed before the low watermark", "", 0},
		{"xipCommittedAfterLow", func(l *chunkLoop) { txn(l, 30, 300, "2") }, []uint32{30}, "", "1", 0},
		{"xipUnknown", func(l *chunkLoop) {}, []uint32{99}, "", "1,2", 0},
		// Transaction 10 committed before L and is at the snapshot's
		// xmax: newer than every xid that had completed, so invisible
		// though not in xip (L's own xid was older). Read again.
		{"pastXmax", func(l *chunkLoop) {}, nil, "transaction 10 committed before the low watermark", "", 10},
		{"belowXmax", func(l *chunkLoop) {}, nil, "", "1,2", 11},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := newChunkLoop()
			txn(l, 10, 100, "7") // committed before L
			l.begin(11, 200)
			l.low(1, 0)
			l.commit(200, 208)
			c.between(l)
			l.begin(12, 400)
			xmax := c.xmax
			if xmax == 0 {
				xmax = 1000
			}
			why, err := l.high(1, testChunkSnap(1, snapshot.TxSnapshot{Xmax: xmax, Xip: c.xip}, "1", "2"), false)
			if err != nil {
				t.Fatal(err)
			}
			kept := l.commit(400, 408)
			if c.want == "" {
				if why != "" || keptKeys(kept) != c.kept {
					t.Fatalf("why %q, kept %s; want no retry, kept %s", why, keptKeys(kept), c.kept)
				}
				return
			}
			if !strings.Contains(why, c.want) || kept != nil || len(l.due(1<<40)) != 0 {
				t.Fatalf("why %q (want %q), kept %s, due %v", why, c.want, keptKeys(kept), l.saves)
			}
			// The next window starts clean.
			l.begin(13, 500)
			l.low(2, 0)
			l.commit(500, 508)
			l.begin(14, 600)
			if why, _ := l.high(2, testChunk(2, nil, "1", "2"), false); why != "" {
				t.Fatalf("the next window is still poisoned: %q", why)
			}
		})
	}
}

// Commits to any mapped table are remembered (a resnapshot request may
// start reading any of them at any moment), and only those: a
// transaction that changed no table (a watermark's) is not.
func TestChunkLoop_RecentForEveryTable(t *testing.T) {
	l := newChunkLoop()
	l.begin(10, 100)
	l.rows(1, []string{"x"}, false) // another route than the chunk's
	l.commit(100, 108)
	l.begin(9, 150) // changed nothing
	l.commit(150, 158)
	l.begin(11, 200)
	l.low(1, 0)
	l.commit(200, 208)
	l.begin(12, 300)
	if why, _ := l.high(1, testChunk(1, []uint32{9}, "1"), false); why != "" {
		t.Fatalf("read again for a transaction that changed no table: %q", why)
	}
	l.commit(300, 308)
	l.begin(13, 400)
	l.low(2, 0)
	l.commit(400, 408)
	l.begin(14, 500)
	if why, _ := l.high(2, testChunk(2, []uint32{10}, "1"), false); !strings.Contains(why, "transaction 10") {
		t.Fatalf("a commit to another table before L, in the xip, was not caught: %q", why)
	}
}

// Watermarks out of order are errors, never a guess.
func TestChunkLoop_OutOfOrder(t *testing.T) {
	l := newChunkLoop()
	if _, err := l.high(1, testChunk(1, nil, "1"), false); err == nil {
		t.Fatal("high without low accepted")
	}
	l.low(1, 0)
	if err := l.low(1, 0); err == nil {
		t.Fatal("a second low of the same chunk accepted")
	}
	if _, err := l.high(2, testChunk(2, nil, "1"), false); err == nil {
		t.Fatal("high of a chunk never opened accepted")
	}
	l.low(3, 0)
	if _, err := l.high(3, nil, false); err == nil {
		t.Fatal("high without the chunk's rows accepted")
	}
	l.low(4, 0)
	if _, err := l.high(4, testChunk(5, nil, "1"), false); err == nil {
		t.Fatal("the rows of another chunk accepted")
	}
}

// Lanes: several chunks open at once, each reconciled with its own window
// only (a change between one chunk's watermarks does not drop rows of a
// chunk whose window had closed, or not yet opened), and each recorded at
// its own high watermark's end, in stream order.
func TestChunkLoop_OverlappingWindows(t *testing.T) {
	l := newChunkLoop()
	txn := func(xid uint32, at pglogrepl.LSN, keys ...string) {
		l.begin(xid, at)
		l.rows(0, keys, false)
		l.commit(at, at+8)
	}
	l.begin(1, 100)
	l.low(1, 0) // lane A: keys a1, a2
	l.commit(100, 108)
	txn(2, 200, "a1", "b1") // in A's window only
	l.begin(3, 300)
	l.low(2, 0) // lane B: keys b1, b2
	l.commit(300, 308)
	txn(4, 400, "a2", "b2") // in both windows
	l.begin(5, 500)
	why, err := l.high(1, testChunk(1, nil, "a1", "a2"), false)
	if err != nil || why != "" {
		t.Fatal(why, err)
	}
	if k := keptKeys(l.commit(500, 508)); k != "" {
		t.Fatalf("lane A kept %s; both its keys changed in its window", k)
	}
	txn(6, 600, "b1") // after A closed, in B's window
	l.begin(7, 700)
	if why, err := l.high(2, testChunk(2, nil, "b1", "b2", "b3"), false); err != nil || why != "" {
		t.Fatal(why, err)
	}
	if k := keptKeys(l.commit(700, 708)); k != "b3" {
		t.Fatalf("lane B kept %s, want b3", k)
	}
	if l.watching(0) {
		t.Fatal("a window is still open")
	}
	due := l.due(1 << 40)
	if len(due) != 2 || due[0].lsn != 508 || due[1].lsn != 708 {
		t.Fatalf("due %+v", due)
	}
}

// A chunk read ahead of one that is read again is dropped whole: nothing
// held, nothing recorded.
func TestChunkLoop_Discard(t *testing.T) {
	l := newChunkLoop()
	l.begin(1, 100)
	l.low(1, 0)
	l.commit(100, 108)
	ch := testChunk(1, nil, "1")
	ch.discard = true
	l.begin(2, 200)
	why, err := l.high(1, ch, false)
	if err != nil || why == "" {
		t.Fatalf("high = %q, %v; want a reason", why, err)
	}
	if kept := l.commit(200, 208); kept != nil || len(l.due(1<<40)) != 0 {
		t.Fatalf("a discarded chunk was kept (%s) or recorded", keptKeys(kept))
	}
}
