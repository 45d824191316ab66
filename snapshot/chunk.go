package snapshot

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/pgfeldera/pgfeldera/catalog"
	"github.com/pgfeldera/pgfeldera/decode/pgvalue"
)

// Incremental snapshots read a keyed table in primary-key
// chunks while the stream flows, each chunk in its own short transaction,
// bracketed in the stream by a low and a high watermark (logical messages
// the connector emits, so they are ordered with the data). This file holds
// the two pure parts: the chunk's query, and the rule that reconciles a
// chunk with the stream between its watermarks. The session wires them.
//
// The exactness argument, for a keyed Feldera table (an insert is an
// upsert by key, a delete removes the key):
//
// Let L and H be the positions of the chunk's low and high watermarks and
// T the moment its SELECT ran, L < T < H in commit order. The chunk's rows
// enter the outbox at H, after every stream change before H, and before
// every change after it.
//
//   - A key of the chunk the stream changed between L and H: its stream
//     change(s) already entered the outbox; the chunk's value was read at T
//     and may be older than the last of them. The chunk's row is dropped
//     (Window.Keep is false), so Feldera holds the stream's last value,
//     which is the value at H.
//   - A key of the chunk the stream did not change between L and H: its
//     value at T is its value at H; the chunk's upsert at H is exact.
//   - A key in the chunk's range the chunk does not hold: it did not exist
//     at T. If the stream inserted it after T, that insert is in the
//     outbox; if it was deleted before T, the delete is (after L) or it was
//     gone before L, and only a resnapshot's retraction has to remove it
//     from Feldera (incremental/retract.go: it runs before the chunks,
//     batch by batch under the same window and xip rule).
//   - A key beyond the chunks copied so far: a stream upsert or delete of
//     it is an upsert or delete in Feldera, harmless, because the key's
//     chunk, read later, carries its value then (or its absence).
//   - A key of an earlier chunk: the stream maintains it as any row.
//
// A gap in "L < T < H in commit order", which the driver must close: a
// transaction's commit record enters the WAL before it leaves the proc
// array (RecordTransactionCommit writes and flushes it, updates the clog,
// waits for a synchronous standby, and only then ProcArrayEndTransaction
// makes it visible). So a transaction X can commit in the WAL before L,
// reach the stream before the window opens, and still be invisible to the
// chunk's snapshot, taken after L's commit returned. The chunk would then
// carry the value before X, upserted at H over X's newer one: a wrong row.
// X is then invisible to the snapshot, and the stream saw X's COMMIT
// before L. Invisible means one of two things: X is in the snapshot's xip
// list (in progress for it), or X is at or past its xmax, which is one
// past the newest xid that had left the proc array. The second is no
// corner: L's xid may be older than X's (L's message is written before
// X's xid is assigned, X commits first), and with nothing newer completed
// the snapshot's xmax is then L's xid + 1, so X is past it and not listed.
// (The first version of this rule looked at xip alone; a resnapshot test
// under a writer caught a stale row that way, once the chunk's BEGIN was
// sent in the same query as L.) The rule that closes it: the chunk
// transaction reads its snapshot (pg_current_snapshot()); the stream loop
// remembers the xids of recent transactions that changed a mapped table
// (any of them: a resnapshot request may start reading one at any time),
// with their commit positions (Recent); at H, a chunk whose snapshot does
// not see one that committed before L is discarded and read again under
// new watermarks. An invisible transaction that commits after L is in the
// window, and its keys are dropped from the chunk as any other change's.
//
// (An earlier version of this rule asked pg_xact_status after the COPY
// and discarded the chunk for any xip transaction already committed. That
// is wrong the other way: under a steady writer nearly every snapshot has
// a transaction in flight that commits while the chunk is read, after L,
// harmlessly, and nearly every chunk would be read again, forever.)
//
// How long X can stay in the proc array after its commit record: L is
// written with the server's own synchronous_commit, so a synchronous
// standby releases X's wait no later than L's (waiters are released in
// LSN order); what remains is the few instructions between X's release
// and its ProcArrayEndTransaction, longer only when X's backend is
// descheduled. Recent keeps the last RecentCap such commits, which covers
// that by orders of magnitude at any commit rate Postgres sustains.
//
// On a keyless table none of this holds (Feldera cannot tell a row's
// update from a second copy, and a stream change to a row not yet copied
// would be counted twice), so incremental mode refuses keyless tables.

// Window is the reconciliation of one chunk with the stream: keys the
// stream touched between the chunk's low and high watermark. Keys are the
// chunk table's Feldera key in one canonical text form, the same the
// stream and the chunk use.
type Window struct {
	open     bool
	touched  map[string]struct{}
	poisoned string
}

// Open starts the window at the low watermark, forgetting any earlier one.
func (w *Window) Open() {
	w.open = true
	w.touched = map[string]struct{}{}
	w.poisoned = ""
}

// Touch records a stream change (insert, update's old and new key, delete)
// to key of the chunk's table. Outside a window it is a no-op.
func (w *Window) Touch(key string) {
	if w.open {
		w.touched[key] = struct{}{}
	}
}

// Active reports whether the window is open (between Open and Close).
func (w *Window) Active() bool { return w.open }

// Close ends the window at the high watermark; Keep answers for the
// chunk's rows until the next Open.
func (w *Window) Close() { w.open = false }

// Keep reports whether a chunk row with key enters the outbox: only a key
// the stream did not change between the watermarks.
func (w *Window) Keep(key string) bool {
	_, touched := w.touched[key]
	return !touched
}

// KeepBytes is Keep of a key held as bytes (no allocation).
func (w *Window) KeepBytes(key []byte) bool {
	_, touched := w.touched[string(key)]
	return !touched
}

// Touched is how many distinct keys the stream changed in the window.
func (w *Window) Touched() int { return len(w.touched) }

// Poison marks the window as unusable: the stream changed the chunk's
// table in a way keys cannot describe (a TRUNCATE, a key it could not
// read). The chunk is then read again under new watermarks. The first
// reason is kept.
func (w *Window) Poison(reason string) {
	if w.open && w.poisoned == "" {
		w.poisoned = reason
	}
}

// Poisoned is why the window cannot be used, "" when it can.
func (w *Window) Poisoned() string { return w.poisoned }

// RecentCap is how many commits Recent remembers.
const RecentCap = 1 << 16

// Recent remembers the commit position of the last RecentCap transactions
// that changed a chunked table, by xid (the 32-bit xid of the stream's
// BEGIN), for the xip rule above.
type Recent struct {
	at   map[uint32]uint64
	ring []uint32
	next int
}

// Add records that transaction xid committed at lsn.
func (r *Recent) Add(xid uint32, lsn uint64) {
	if r.at == nil {
		r.at = map[uint32]uint64{}
	}
	if len(r.ring) < RecentCap {
		r.ring = append(r.ring, xid)
	} else {
		delete(r.at, r.ring[r.next])
		r.ring[r.next] = xid
		r.next = (r.next + 1) % RecentCap
	}
	r.at[xid] = lsn
}

// CommittedBefore returns a transaction that committed at a position
// before lsn and that snap does not see, and whether there is one.
func (r *Recent) CommittedBefore(snap TxSnapshot, lsn uint64) (uint32, bool) {
	for _, x := range snap.Xip {
		if at, ok := r.at[x]; ok && at < lsn {
			return x, true
		}
	}
	if snap.Xmax == 0 {
		return 0, false
	}
	for _, x := range r.ring {
		if snap.Invisible(x) {
			if at, ok := r.at[x]; ok && at < lsn {
				return x, true
			}
		}
	}
	return 0, false
}

// TxSnapshot is what the rule needs of a pg_snapshot: the transactions it
// does not see. Xids are cut to the 32 bits the stream's BEGIN carries.
// The zero value is no snapshot (a retraction batch with no keys to
// check), which sees everything.
type TxSnapshot struct {
	Xmax uint32   // every xid from it on is invisible
	Xip  []uint32 // in progress, below Xmax
}

// Invisible reports whether xid is in progress for the snapshot or
// started after it (at or past its xmax, in the modulo-2^32 order
// Postgres compares xids in).
func (s TxSnapshot) Invisible(xid uint32) bool {
	if s.Xmax == 0 {
		return false
	}
	if int32(xid-s.Xmax) >= 0 {
		return true
	}
	for _, x := range s.Xip {
		if x == xid {
			return true
		}
	}
	return false
}

// ParseSnapshot parses a pg_snapshot's text form ("xmin:xmax:xip,...").
func ParseSnapshot(snap string) (TxSnapshot, error) {
	parts := strings.Split(snap, ":")
	if len(parts) != 3 {
		return TxSnapshot{}, fmt.Errorf("snapshot %q: want xmin:xmax:xip", snap)
	}
	xmax, err := strconv.ParseUint(parts[1], 10, 64)
	if err != nil || xmax == 0 {
		return TxSnapshot{}, fmt.Errorf("snapshot %q: xmax %q: not a transaction id", snap, parts[1])
	}
	out := TxSnapshot{Xmax: uint32(xmax)}
	if out.Xmax == 0 {
		out.Xmax = 1 // xmax a multiple of 2^32: still "from it on"
	}
	if parts[2] == "" {
		return out, nil
	}
	for _, f := range strings.Split(parts[2], ",") {
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return TxSnapshot{}, fmt.Errorf("snapshot %q: xid %q: %v", snap, f, err)
		}
		out.Xip = append(out.Xip, uint32(v))
	}
	return out, nil
}

// ChunkSQL is the COPY of one chunk: cols of the rows after the key
// value after (nil for the first chunk), in key order, at most limit. COPY
// takes no parameters, so the bound is written as typed literals from the
// previous chunk's last key, in Postgres's text form; a row value
// comparison (k1, k2) > (v1, v2) is the key order of the primary key's
// btree, so the chunks partition the table without overlap or gap.
func (s Source) ChunkSQL(cols []string, key []catalog.KeyColumn, after []string, limit int) (string, error) {
	return s.LaneChunkSQL(cols, key, Lane{}, after, limit)
}

// Lane is a range of a table's first key column, read by one connection
// when a table is read in parallel (SNAPSHOT_PARALLELISM): the keys whose
// first column is above Lo (when set) and at most Hi (when set), as
// Postgres prints the column's values. Lanes with Hi of one the Lo of the
// next partition the table.
type Lane struct {
	Lo, Hi *string
}

// LaneChunkSQL is ChunkSQL within lane.
func (s Source) LaneChunkSQL(cols []string, key []catalog.KeyColumn, lane Lane, after []string, limit int) (string, error) {
	if len(key) == 0 {
		return "", fmt.Errorf("chunk of %s: the table has no key to chunk by", s.Table)
	}
	if after != nil && len(after) != len(key) {
		return "", fmt.Errorf("chunk of %s: %d key values for %d key columns", s.Table, len(after), len(key))
	}
	if limit <= 0 {
		return "", fmt.Errorf("chunk of %s: limit %d", s.Table, limit)
	}
	quoted := make([]string, len(cols))
	for i, c := range cols {
		quoted[i] = pgvalue.QuoteIdent(c)
	}
	keys := make([]string, len(key))
	for i, k := range key {
		keys[i] = pgvalue.QuoteIdent(k.Name)
	}
	var where []string
	if s.Filter != "" {
		where = append(where, "("+s.Filter+")")
	}
	if lane.Lo != nil {
		where = append(where, keys[0]+" > "+pgvalue.QuoteLiteral(*lane.Lo)+"::"+key[0].Type)
	}
	if lane.Hi != nil {
		where = append(where, keys[0]+" <= "+pgvalue.QuoteLiteral(*lane.Hi)+"::"+key[0].Type)
	}
	if after != nil {
		lits := make([]string, len(after))
		for i, v := range after {
			lits[i] = pgvalue.QuoteLiteral(v) + "::" + key[i].Type
		}
		where = append(where, "("+strings.Join(keys, ", ")+") > ("+strings.Join(lits, ", ")+")")
	}
	sel := fmt.Sprintf("SELECT %s FROM %s", strings.Join(quoted, ", "), s.Table)
	if len(where) > 0 {
		sel += " WHERE " + strings.Join(where, " AND ")
	}
	sel += fmt.Sprintf(" ORDER BY %s LIMIT %d", strings.Join(keys, ", "), limit)
	return "COPY (" + sel + ") TO STDOUT", nil
}

// Lanes splits a table into at most n lanes at values of its first key
// column: bounds is pg_stats.histogram_bounds of that column (sorted, as
// Postgres prints them), whose buckets hold about equal numbers of rows.
// Without bounds, or for n of 1, the table is one lane.
func Lanes(bounds []string, n int) []Lane {
	if n <= 1 || len(bounds) < 2 {
		return []Lane{{}}
	}
	var cuts []string
	for i := 1; i < n; i++ {
		b := bounds[i*(len(bounds)-1)/n]
		if len(cuts) == 0 || cuts[len(cuts)-1] != b {
			cuts = append(cuts, b)
		}
	}
	lanes := make([]Lane, len(cuts)+1)
	for i := range cuts {
		lanes[i].Hi = &cuts[i]
		lanes[i+1].Lo = &cuts[i]
	}
	return lanes
}

// Block ranges. An ordinary table (not a partitioned one) is read in
// ranges of its heap's blocks rather than of its primary key: a TID range
// scan (PostgreSQL 14+) reads a range sequentially, as the initial COPY
// does, where a key range costs an index scan and a sort-free but random
// heap walk (measured in docs/performance.md, bench k). The window and
// the xip rule above do not depend on how the chunks partition the table;
// what block ranges need besides, argued here:
//
//   - Every row version the chunks must read lies below End, the heap's
//     size in blocks when the table's read was planned (after the slot's
//     consistent point, or after a resnapshot request's position): a
//     version that existed then lay in a block that existed then. A
//     version written later is written by a transaction that commits
//     after that position, so the stream carries it.
//   - A row the stream does not change keeps its place: the heap moves a
//     version only by writing a new one (an UPDATE, which the stream
//     carries), except when the table is rewritten (VACUUM FULL, CLUSTER,
//     a rewriting ALTER TABLE, pg_repack). A rewrite gives the table a
//     new relfilenode; each chunk reads the relfilenode its COPY scans
//     (it locks the table, ACCESS SHARE, before reading it, and the lock
//     holds until its commit, so no rewrite commits between the read and
//     the COPY's scan), and a chunk that finds another than the plan's
//     makes the table be read again from its first block under a new
//     plan. Without that check a rewrite
//     that compacts the heap moves unread rows into blocks already read,
//     and they are lost (TestIncremental_RewriteDuringBlocks shows it).
//
// So, for a key, at the end: either the stream changed it after the
// table's read began, and Feldera holds the stream's last value (the
// window argument keeps a chunk from overwriting it), or it did not, and
// it sat in one block below End all along, in exactly one chunk's range.

// BlockChunkSQL is the COPY of the rows in blocks [from, to) of s.
func (s Source) BlockChunkSQL(cols []string, from, to uint32) (string, error) {
	if to < from {
		return "", fmt.Errorf("chunk of %s: block range [%d, %d)", s.Table, from, to)
	}
	quoted := make([]string, len(cols))
	for i, c := range cols {
		quoted[i] = pgvalue.QuoteIdent(c)
	}
	sel := fmt.Sprintf("SELECT %s FROM %s WHERE ctid >= '(%d,0)'::tid AND ctid < '(%d,0)'::tid", strings.Join(quoted, ", "), s.Table, from, to)
	if s.Filter != "" {
		sel += " AND (" + s.Filter + ")"
	}
	return "COPY (" + sel + ") TO STDOUT", nil
}

// BlockLanes splits blocks [0, end) into at most n lanes of about equal
// size, as [Lo, Hi) pairs.
func BlockLanes(end uint32, n int) [][2]uint32 {
	if n < 1 {
		n = 1
	}
	if uint32(n) > end {
		n = max(int(end), 1)
	}
	out := make([][2]uint32, n)
	for i := range out {
		out[i] = [2]uint32{uint32(uint64(end) * uint64(i) / uint64(n)), uint32(uint64(end) * uint64(i+1) / uint64(n))}
	}
	return out
}

// BlocksPerChunk is how many blocks the next chunk reads: about rows rows
// and at most maxBytes bytes, at the rows and bytes per block the chunks
// before read, at least one block. Until a chunk has read a row, nothing
// says how wide the rows are (one block of TOAST pointers can stand for
// gigabytes): the first chunk reads one block, and each empty one twice
// as many as prev, the one before.
func BlocksPerChunk(rows, maxBytes int, rowsPerBlock, bytesPerBlock float64, prev uint32) uint32 {
	const most = 1 << 20
	if rowsPerBlock <= 0 || bytesPerBlock <= 0 {
		return min(max(1, 2*prev), most)
	}
	n := float64(rows) / rowsPerBlock
	if maxBytes > 0 {
		n = min(n, float64(maxBytes)/bytesPerBlock)
	}
	if n < 1 {
		return 1
	}
	if n > most {
		return most
	}
	return uint32(n)
}
