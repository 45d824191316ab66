package connector_test

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/internal/pgcluster"

	"github.com/jackc/pgx/v5"

	"github.com/pgfeldera/pgfeldera/connector"
	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/state"
)

// mutator commits what its SQL function returns, one query after
// another on its own connection, until stopped.
type mutator struct {
	stop atomic.Bool
	ops  atomic.Int64
	wg   sync.WaitGroup
}

// startMutator commits random inserts, updates and deletes of keys in
// [1, n] of table.
func (e *env) startMutator(table string, n int, seed int64) *mutator {
	rng := rand.New(rand.NewSource(seed))
	return e.startWrites(func() string {
		id := rng.Intn(n) + 1
		switch rng.Intn(3) {
		case 0:
			return fmt.Sprintf("INSERT INTO %s VALUES (%d, 'ins', %d) ON CONFLICT (id) DO UPDATE SET name = 'reins', score = excluded.score", table, id, rng.Intn(1000))
		case 1:
			return fmt.Sprintf("UPDATE %s SET name = 'upd', score = score + 1 WHERE id = %d", table, id)
		default:
			return fmt.Sprintf("DELETE FROM %s WHERE id = %d", table, id)
		}
	})
}

// startWrites runs next's queries (the simple protocol: several
// statements, a transaction, may be one) until halted.
func (e *env) startWrites(next func() string) *mutator {
	m := &mutator{}
	conn, err := pgx.Connect(context.Background(), e.dsn)
	if err != nil {
		e.t.Fatal(err)
	}
	m.wg.Add(1)
	e.t.Cleanup(func() { m.halt() }) // a failed test leaves no writer behind
	go func() {
		defer m.wg.Done()
		defer conn.Close(context.Background())
		for !m.stop.Load() {
			if _, err := conn.Exec(context.Background(), next()); err != nil {
				e.t.Errorf("mutator: %v", err)
				return
			}
			m.ops.Add(1)
		}
	}()
	return m
}

func (m *mutator) halt() int64 {
	m.stop.Store(true)
	m.wg.Wait()
	return m.ops.Load()
}

// An incremental snapshot under a writer that inserts, updates and
// deletes random keys during the whole copy, and that changes rows of
// each chunk after the chunk was read and before its high watermark:
// Feldera ends exact. With the window disabled (every chunk row kept) the
// same history leaves stale and ghost rows, so the test sees a loss.
func TestIncremental_ExactUnderWrites(t *testing.T) {
	pgcluster.EveryVersion(t)
	t.Parallel()
	for _, c := range []struct {
		name   string
		unsafe bool
		lanes  int
		byKey  bool // key ranges, as a partitioned table is read
	}{{"window", false, 1, false}, {"noWindow", true, 1, false}, {"window/parallel3", false, 3, false},
		{"window/keys", false, 1, true}, {"noWindow/keys", true, 1, true}, {"window/keys/parallel3", false, 3, true}} {
		unsafe, byKey := c.unsafe, c.byKey
		t.Run(c.name, func(t *testing.T) {
			if unsafe {
				pgcluster.AnyVersion(t) // the check sees a loss: one server shows it
			}
			e := newEnv(t, mixedPG, mixedFeldera)
			const rows = 20000
			e.exec(fmt.Sprintf("INSERT INTO users SELECT g, 'pre', g FROM generate_series(1, %d) g", rows))
			e.exec("ANALYZE users")
			e.exec("INSERT INTO items SELECT g, 'eu', g FROM generate_series(1, 3000) g")
			e.fel.SetCompletionDelay(5 * time.Millisecond)
			cfg := e.incrementalConfig("users,public.items:catalog_items", 1000)
			cfg.SnapshotParallelism = c.lanes
			lanes := c.lanes
			c := e.newConnector(cfg, e.client)
			var planted atomic.Int64
			connector.SetChunkReadHook(c, func(table string, keys []string) {
				if table != "public.users" || len(keys) < 2 {
					return
				}
				// Between the chunk's read and its high watermark: the
				// stream's changes must win over the rows read.
				e.execOwn(fmt.Sprintf("UPDATE users SET name = 'in window' WHERE id = %s", keys[0]))
				e.execOwn(fmt.Sprintf("DELETE FROM users WHERE id = %s", keys[1]))
				planted.Add(1)
			})
			if unsafe {
				connector.DisableChunkWindow(c)
			}
			if byKey {
				connector.ChunkByKey(c)
			}
			m := e.startMutator("users", rows+2000, 7)
			e.run(c)
			e.waitLog("snapshot: incremental: complete", 120*time.Second)
			ops := m.halt()
			e.waitConfirmed(e.currentLSN(), 60*time.Second)
			if !exactUnlessUnsafe(t, e.diff("users", "users"), unsafe, "without the window",
				"with every chunk row kept, the chunks' stale rows should have overwritten the stream's changes") {
				return
			}
			e.assertEqual("items", "catalog_items")
			st, err := state.Load(cfg.StateFile)
			// Block ranges are sized from the rows per block read so far:
			// about BATCH_MAX_ROWS rows each, not exactly.
			if err != nil || !st.Complete() || st.Tables[0].Chunks < st.Tables[0].Copied/2000 || st.Tables[0].Copied < rows/2 {
				t.Fatalf("state = %+v, %v", st, err)
			}
			if ts := c.Tables()[0]; ts.ChunksDone.Load() != st.Tables[0].Chunks || ts.ChunksTotal.Load() < ts.ChunksDone.Load() {
				t.Fatalf("chunk gauges: done %d, total %d; the state says %d chunks", ts.ChunksDone.Load(), ts.ChunksTotal.Load(), st.Tables[0].Chunks)
			}
			if planted.Load() < 10 {
				t.Fatalf("only %d chunks had rows changed in their window", planted.Load())
			}
			if strings.Contains(e.logs.String(), "created slot with exported snapshot") {
				t.Fatal("incremental mode exported a snapshot")
			}
			if lanes > 1 && !strings.Contains(e.logs.String(), "reading the table in lanes") {
				t.Fatal("the table was not read in lanes")
			}
			if blocks := strings.Contains(e.logs.String(), "block ranges"); blocks == byKey {
				t.Fatalf("read in block ranges: %v, want %v", blocks, !byKey)
			}
			t.Logf("%d concurrent writes, %d chunks with changes planted in the window; users in %d chunks, %d lanes", ops, planted.Load(), st.Tables[0].Chunks, lanes)
		})
	}
}

// A table that cannot be chunked exactly is refused before a slot exists,
// naming the table: a Postgres primary key that differs from Feldera's.
func TestIncremental_RefusesMismatchedKey(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	// FULL: the replica identity carries id, so what is refused is the
	// chunk key, not the identity.
	e := newEnv(t, `CREATE TABLE users (id bigint, name text, score int, PRIMARY KEY (name));
ALTER TABLE users REPLICA IDENTITY FULL;
CREATE PUBLICATION pub FOR TABLE users;`, `CREATE TABLE users (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR, score INT);`)
	cfg := e.config("users")
	cfg.SnapshotMode = connector.SnapshotIncremental
	c := e.newConnector(cfg, e.client)
	r := e.run(c)
	var err error
	select {
	case err = <-r.done:
		r.done <- err // for the cleanup's stop
	case <-time.After(30 * time.Second):
		t.Fatal("the connector did not refuse the table")
	}
	if err == nil || !strings.Contains(err.Error(), "public.users") || !strings.Contains(err.Error(), "primary key (name)") {
		t.Fatalf("err = %v, want a refusal naming public.users and its primary key", err)
	}
	var n int
	if err := e.db.QueryRow(context.Background(), "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", cfg.Slot).Scan(&n); err != nil || n != 0 {
		t.Fatalf("a slot was created (%d, %v)", n, err)
	}
}

// A TRUNCATE between a chunk's read and its high watermark: the chunk is
// read again (its rows are gone), the rows of earlier chunks are
// retracted, the snapshot goes on, and Feldera ends exact.
//
// Read in block ranges, the TRUNCATE also gives the table a new
// relfilenode: the chunk after it ends the session, and the next one
// reads the table again from its first block. Exact either way.
func TestIncremental_TruncateInWindow(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	for _, byKey := range []bool{true, false} {
		name := "keys"
		if !byKey {
			name = "blocks"
		}
		t.Run(name, func(t *testing.T) { truncateInWindow(t, byKey) })
	}
}

func truncateInWindow(t *testing.T, byKey bool) {
	e := newEnv(t, mixedPG, mixedFeldera)
	e.exec("INSERT INTO users SELECT g, 'pre', g FROM generate_series(1, 5000) g")
	e.exec("ANALYZE users")
	cfg := e.incrementalConfig("users,public.items:catalog_items", 500)
	c := e.newConnector(cfg, e.client)
	if byKey {
		connector.ChunkByKey(c)
	}
	var chunks atomic.Int64
	connector.SetChunkReadHook(c, func(table string, keys []string) {
		if table == "public.users" && chunks.Add(1) == 3 {
			e.execOwn("BEGIN; TRUNCATE users; INSERT INTO users SELECT g, 'after truncate', g FROM generate_series(4000, 6000) g; COMMIT")
		}
	})
	e.run(c)
	e.waitLog("snapshot: incremental: complete", 60*time.Second)
	e.exec("INSERT INTO users VALUES (7000, 'later', 0)")
	e.waitConfirmed(e.currentLSN(), 30*time.Second)
	e.assertEqual("users", "users")
	if !strings.Contains(e.logs.String(), "why=\"a TRUNCATE of the table\"") && (byKey || !strings.Contains(e.logs.String(), "the table was rewritten while it was read in block ranges")) {
		t.Fatal("the chunk read before the TRUNCATE was not read again")
	}
}

// A table rewritten (VACUUM FULL) while it is read in block ranges: the
// rewrite compacts the heap, moving rows not read yet into blocks read
// already. The chunk after it finds a new relfilenode, the session ends,
// and the next one reads the table again from its first block: exact.
// Without the check the moved rows are never read, and Feldera lacks them.
func TestIncremental_RewriteDuringBlocks(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	for _, unsafe := range []bool{false, true} {
		name := "checked"
		if unsafe {
			name = "unchecked"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, mixedPG, mixedFeldera)
			// 20,000 rows, the first 15,000 deleted before the slot exists:
			// the heap's first three quarters are dead rows, the live ones
			// at its end. VACUUM FULL moves them to its beginning.
			e.exec("INSERT INTO users SELECT g, 'pre', g FROM generate_series(1, 20000) g")
			e.exec("DELETE FROM users WHERE id <= 15000")
			e.exec("ANALYZE users")
			cfg := e.incrementalConfig("users,public.items:catalog_items", 1000)
			c := e.newConnector(cfg, e.client)
			var once sync.Once
			connector.SetChunkReadHook(c, func(table string, keys []string) {
				if table == "public.users" {
					once.Do(func() { e.execOwn("VACUUM FULL users") })
				}
			})
			if unsafe {
				connector.IgnoreRewrite(c)
			}
			e.run(c)
			e.waitLog("snapshot: incremental: complete", 60*time.Second)
			e.exec("INSERT INTO users VALUES (30000, 'later', 0)")
			e.waitConfirmed(e.currentLSN(), 30*time.Second)
			if !exactUnlessUnsafe(t, e.diff("users", "users"), unsafe, "without the relfilenode check",
				"with the rewrite ignored, the rows it moved into blocks already read should be missing") {
				return
			}
			if !strings.Contains(e.logs.String(), "the table was rewritten while it was read in block ranges") {
				t.Fatal("the rewrite was not noticed")
			}
		})
	}
}

// exactUnlessUnsafe checks a test's diff d: empty for the safe variant;
// for the unsafe one (unsafe set), not empty, or the test could not see a
// loss (want says what should have been lost), and logged. It reports
// whether the safe variant's checks go on.
func exactUnlessUnsafe(t *testing.T, d string, unsafe bool, variant, want string) bool {
	t.Helper()
	if unsafe {
		if d == "" {
			t.Fatal(want + ": the test cannot see a loss")
		}
		t.Logf("%s: %d lines of difference, e.g. %s", variant, strings.Count(d, "\n"), firstLine(d))
		return false
	}
	if d != "" {
		t.Fatal(d)
	}
	return true
}

// Chunks are bounded in bytes, not only in rows: a chunk is held in memory
// whole, and a row can be as wide as its TOASTed values. Rows of 64 KiB
// under BATCH_MAX_BYTES=512KiB are read a few at a time, in block ranges
// and in key ranges alike; under the default 4MiB, eight times as many,
// so the test sees the bound move the chunks.
func TestIncremental_ChunksBoundedInBytes(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	for _, c := range []struct {
		name     string
		byKey    bool
		maxBytes int
	}{{"blocks", false, 512 << 10}, {"keys", true, 512 << 10}, {"blocks/4MiB", false, 4 << 20}, {"keys/4MiB", true, 4 << 20}} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, `CREATE TABLE wide (id bigint PRIMARY KEY, payload text);
CREATE PUBLICATION pub FOR TABLE wide;`, `CREATE TABLE wide (id BIGINT NOT NULL PRIMARY KEY, payload VARCHAR);`)
			e.exec("INSERT INTO wide SELECT g, repeat(md5(g::text), 2048) FROM generate_series(1, 150) g")
			cfg := e.incrementalConfig("wide", 1000)
			cfg.BatchMaxBytes = c.maxBytes
			conn := e.newConnector(cfg, e.client)
			if c.byKey {
				connector.ChunkByKey(conn)
			}
			e.run(conn)
			e.waitLog("snapshot: incremental: complete", 60*time.Second)
			e.waitConfirmed(e.currentLSN(), 30*time.Second)
			e.assertEqual("wide", "wide")
			most := 0
			for _, l := range strings.Split(e.logs.String(), "\n") {
				if i := strings.Index(l, "chunk read"); i >= 0 {
					var n int
					if j := strings.Index(l, " rows="); j >= 0 {
						fmt.Sscanf(l[j+len(" rows="):], "%d", &n)
					}
					most = max(most, n)
				}
			}
			// 64 KiB rows: 8 fit 512 KiB; a block range reads at least
			// one block, which holds a few of these (compressed inline).
			if c.maxBytes < 1<<20 && (most == 0 || most > 16) {
				t.Fatalf("the largest chunk held %d rows of 64 KiB, want at most 16 under BATCH_MAX_BYTES=512KiB", most)
			}
			if c.maxBytes >= 1<<20 && (most <= 16 || most > 80) {
				t.Fatalf("under BATCH_MAX_BYTES=4MiB the largest chunk held %d rows of 64 KiB, want about 64: the test cannot see the bound", most)
			}
			t.Logf("largest chunk: %d rows", most)
		})
	}
}

// A key-range read the state file records as begun (as every incremental
// snapshot was read before block ranges) resumes in key ranges after its
// last key, and ends exact: an upgrade in the middle of a snapshot does
// not switch a table's ranges under it.
func TestIncremental_KeyRangeStateResumesInKeys(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	e := newEnv(t, mixedPG, mixedFeldera)
	e.exec("INSERT INTO users SELECT g, 'pre', g FROM generate_series(1, 20000) g")
	e.fel.SetCompletionDelay(20 * time.Millisecond)
	cfg := e.incrementalConfig("users", 1000)
	c := e.newConnector(cfg, e.client)
	connector.ChunkByKey(c)
	// The fourth chunk's read is held until the test stops the
	// connector: the first run must end with the table still to read,
	// however fast the chunks before it go.
	var reads atomic.Int32
	release := make(chan struct{})
	connector.SetChunkReadHook(c, func(string, []string) {
		if reads.Add(1) == 4 {
			select {
			case <-release:
			case <-time.After(60 * time.Second):
			}
		}
	})
	r := e.run(c)
	deadline := time.Now().Add(60 * time.Second)
	for {
		st, err := state.Load(cfg.StateFile)
		if err == nil && len(st.Tables) == 1 && st.Tables[0].After != nil && st.Tables[0].Status == state.Incremental {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no chunk was recorded: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	r.stop(t)
	st, err := state.Load(cfg.StateFile)
	if err != nil || st.Tables[0].Status != state.Incremental || st.Tables[0].Blocks != nil {
		t.Fatalf("after the first run: %+v, %v", st, err)
	}
	before := len(e.logs.String())
	e.exec("UPDATE users SET name = 'changed' WHERE id % 7 = 0")
	e.run(e.newConnector(cfg, e.client)) // block ranges allowed
	e.waitLog("snapshot: incremental: complete", 60*time.Second)
	e.waitConfirmed(e.currentLSN(), 30*time.Second)
	e.assertEqual("users", "users")
	second := e.logs.String()[before:]
	if strings.Contains(second, "block ranges") || !strings.Contains(second, "resume_after="+st.Tables[0].After[0]) {
		t.Fatalf("the second run did not resume the key-range read after key %v", st.Tables[0].After)
	}
}

// incrementalConfig is e.config(tables) for an incremental snapshot in
// batches (and chunks) of batchRows rows.
func (e *env) incrementalConfig(tables string, batchRows int) connector.Config {
	cfg := e.config(tables)
	cfg.SnapshotMode = connector.SnapshotIncremental
	cfg.BatchMaxRows = batchRows
	cfg.SnapshotChunkRows = batchRows
	return cfg
}

// A resnapshot decided at startup under SNAPSHOT_MODE=incremental is
// incremental too: a new slot without an exported snapshot, and every
// table retracted and read again in chunks while the stream runs. Here the
// slot was dropped while pgfeldera was stopped, rows were deleted and
// changed meanwhile, and Feldera holds a row Postgres never had: the
// retraction deletes what Feldera holds and Postgres lacks, so Feldera
// ends exact. Without the retraction (the unsafe variant), the deleted
// rows and the stray one stay in Feldera.
func TestIncremental_StartupResnapshot(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	for _, unsafe := range []bool{false, true} {
		t.Run(map[bool]string{false: "retract", true: "noRetract"}[unsafe], func(t *testing.T) {
			e := newEnv(t, mixedPG, mixedFeldera)
			e.exec("INSERT INTO users SELECT g, 'pre', g FROM generate_series(1, 3000) g")
			e.exec("INSERT INTO items SELECT g, 'eu', g FROM generate_series(1, 500) g")
			cfg := e.incrementalConfig("users,public.items:catalog_items", 500)
			complete := func(sessions int) {
				t.Helper()
				e.poll("the incremental snapshot to complete", 60*time.Second, func() bool {
					return strings.Count(e.logs.String(), "snapshot: incremental: complete") >= sessions
				})
				e.waitConfirmed(e.currentLSN(), 30*time.Second)
			}
			r := e.start(cfg)
			complete(1)
			if err := r.stop(t); err != nil {
				t.Fatal(err)
			}
			e.assertEqual("users", "users")

			e.dropSlot(e.slot)
			e.exec("DELETE FROM users WHERE id <= 10")
			e.exec("UPDATE users SET name = 'changed while down' WHERE id BETWEEN 11 AND 20")
			e.exec("DELETE FROM items WHERE sku <= 5")
			if err := e.fel.Put("users", `{"id": 777777, "name": "stray", "score": 0}`); err != nil {
				t.Fatal(err)
			}
			// A `pgfeldera resnapshot --wait users` taken before the slot
			// was lost: it must end when the resnapshot read users again.
			st, err := state.Load(cfg.StateFile)
			if err != nil {
				t.Fatal(err)
			}
			st.AddRequest(state.Request{ID: "before", Tables: []string{"public.users"}})
			if err := state.Save(cfg.StateFile, st); err != nil {
				t.Fatal(err)
			}
			c := e.newConnector(cfg, e.client)
			if unsafe {
				connector.SkipStartupRetraction(c)
			}
			r = e.run(c)
			complete(2)
			e.exec("INSERT INTO users VALUES (9999, 'after', 0)")
			e.waitConfirmed(e.currentLSN(), 30*time.Second)
			if err := r.stop(t); err != nil {
				t.Fatal(err)
			}
			logs := e.logs.String()
			if !strings.Contains(logs, "startup: resnapshot") {
				t.Fatalf("no resnapshot was decided at startup:\n%s", tail(logs, 3000))
			}
			if strings.Contains(logs, "created slot with exported snapshot") {
				t.Fatal("the resnapshot exported a snapshot: it read the tables the initial mode's way")
			}
			if n := strings.Count(logs, "created the slot without an exported snapshot"); n != 2 {
				t.Fatalf("%d incremental slots created, want 2", n)
			}
			if !exactUnlessUnsafe(t, e.diff("users", "users"), unsafe, "without the retraction",
				"without the retraction, the rows deleted while the slot was gone should have stayed in Feldera") {
				return
			}
			e.assertEqual("items", "catalog_items")
			if !strings.Contains(logs, "resnapshot: retraction done") {
				t.Fatal("no retraction logged")
			}
			st, err = state.Load(cfg.StateFile)
			if err != nil || !st.Complete() || st.Tables[0].Retracted != 11 || st.Tables[1].Retracted != 5 {
				t.Fatalf("state = %+v, %v; want users 11 rows retracted (10 deleted, 1 stray), items 5", st, err)
			}
			if r := st.Request("before"); r == nil || !r.Done {
				t.Fatalf("the request taken before the resnapshot = %+v, want it kept and done", r)
			}
		})
	}
}

// An incremental start records every table as pending before it creates
// its slot: a crash after the slot exists and before the state records
// it then decides a resnapshot on the next start. Here the old slot was
// lost while pgfeldera was stopped and rows were committed meanwhile; the
// start that replaces it fails right after creating the new slot. Without
// the pending state first (the unsafe variant), the next start finds the
// old complete state and a slot, streams from the new slot, and the rows
// committed while no slot existed never reach Feldera.
func TestIncremental_CrashAfterNewSlot(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	for _, unsafe := range []bool{false, true} {
		t.Run(map[bool]string{false: "pendingFirst", true: "noPendingFirst"}[unsafe], func(t *testing.T) {
			e := newEnv(t, mixedPG, mixedFeldera)
			e.exec("INSERT INTO users SELECT g, 'pre', g FROM generate_series(1, 2000) g")
			cfg := e.incrementalConfig("users", 500)
			count := func(s string) int { return strings.Count(e.logs.String(), s) }
			r := e.start(cfg)
			e.poll("the first snapshot", 60*time.Second, func() bool { return count("snapshot: incremental: complete") == 1 })
			e.waitConfirmed(e.currentLSN(), 30*time.Second)
			if err := r.stop(t); err != nil {
				t.Fatal(err)
			}

			e.dropSlot(e.slot)
			e.exec("INSERT INTO users SELECT g, 'while no slot', g FROM generate_series(5001, 5010) g")
			c := e.newConnector(cfg, e.client)
			connector.FailAfterSlot(c, unsafe)
			r = e.run(c)
			e.refusal(r, "the failing start", 30*time.Second, "test hook")

			sessions := count("session: streaming")
			r = e.start(cfg)
			e.poll("the next session", 60*time.Second, func() bool { return count("session: streaming") > sessions })
			if !unsafe {
				e.poll("the resnapshot", 60*time.Second, func() bool { return count("snapshot: incremental: complete") == 2 })
			}
			e.exec("INSERT INTO users VALUES (9999, 'after', 0)")
			e.waitConfirmed(e.currentLSN(), 30*time.Second)
			if err := r.stop(t); err != nil {
				t.Fatal(err)
			}
			if !exactUnlessUnsafe(t, e.diff("users", "users"), unsafe, "without the pending state first",
				"without the pending state first, the rows committed while no slot existed should be missing") {
				return
			}
			if !strings.Contains(e.logs.String(), "did not complete") {
				t.Fatal("the start after the failed one did not decide a resnapshot")
			}
		})
	}
}

// A table's last chunk is sent as soon as the outbox may send it, not at
// the linger deadline: no more rows of the read are coming to fill its
// batch, and the table is exact in Feldera only once they are complete.
// With BATCH_LINGER_MS at its largest (an hour), the snapshot still ends;
// a last chunk left to the linger would hold it for that hour.
func TestIncremental_LastChunkNotLeftToLinger(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	for _, lanes := range []int{1, 2} {
		t.Run(fmt.Sprintf("lanes%d", lanes), func(t *testing.T) {
			e := newEnv(t, mixedPG, mixedFeldera)
			e.exec("INSERT INTO users SELECT g, 'pre', g FROM generate_series(1, 2500) g")
			cfg := e.incrementalConfig("users", 1000)
			cfg.BatchLinger = time.Hour
			cfg.SnapshotParallelism = lanes
			e.start(cfg)
			e.waitLog("snapshot: incremental: complete", 60*time.Second)
			e.assertEqual("users", "users")
		})
	}
}

// A chunk whose high watermark is late gets the stream loop to send
// status updates (which wake a walsender that slept through the
// watermark's flush) every watermarkNudge until it comes, instead of
// waiting for the next regular one (10 s here). The hook holds the
// first chunk's watermark back 1.3 s: two or three nudges.
func TestIncremental_LateWatermarkNudgesTheWalsender(t *testing.T) {
	pgcluster.EveryVersion(t)
	// Not parallel: the nudge wakes an idle walsender, and on a cluster
	// other tests write to the walsender is not idle (a parallel -race run
	// saw no nudge in a 3 s hold, twice).
	e := newEnv(t, mixedPG, mixedFeldera)
	e.exec("INSERT INTO users SELECT g, 'pre', g FROM generate_series(1, 300) g")
	c := e.newConnector(e.incrementalConfig("users", 100), e.client)
	var held atomic.Bool
	connector.SetChunkReadHook(c, func(string, []string) {
		if held.CompareAndSwap(false, true) {
			// Six nudge intervals: the test wants two nudges, and a loaded
			// machine (a parallel -race run) saw none in 1.3 s.
			time.Sleep(3 * time.Second)
		}
	})
	e.run(c)
	e.waitLog("snapshot: incremental: complete", 60*time.Second)
	e.assertEqual("users", "users")
	const nudge = "a chunk's high watermark has not come: status update sent to wake the walsender"
	if n := strings.Count(e.logs.String(), nudge); n < 2 {
		t.Fatalf("%d status updates while a chunk's watermark was held 3 s; want at least 2 (one per %s)", n, connector.WatermarkNudge)
	}
}

// slowSink takes a while over every push, so that the stream often has a
// batch in flight when a table's last chunk enters the outbox.
type slowSink struct {
	*feldera.Client
	d time.Duration
}

func (s slowSink) Ingress(ctx context.Context, table string, body []byte) (string, error) {
	time.Sleep(s.d)
	return s.Client.Ingress(ctx, table, body)
}

// A table's last chunk that cannot be sent at once (a push is running)
// waits, when a source transaction has begun meanwhile, for its COMMIT,
// and is sent then. It once livelocked instead: the linger deadline,
// already past, ended every receive before it read, so the COMMIT never
// came and the snapshot never completed. The writer's transactions each
// change one row of users and then many of a table outside the
// publication, so the stream spends a while inside each one. (It pauses
// between them: writing 20,000 rows a transaction without pause, it
// outran logical decoding on this machine kind, and the stream fell
// further behind the chunks' watermarks the longer the test ran.)
func TestIncremental_LastChunkWhileTransactionsStream(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	e := newEnv(t, mixedPG, mixedFeldera)
	e.exec("INSERT INTO users SELECT g, 'pre', g FROM generate_series(1, 3000) g")
	e.exec("INSERT INTO items SELECT g, 'eu', g FROM generate_series(1, 3000) g")
	cfg := e.incrementalConfig("users,public.items:catalog_items", 250)
	cfg.BatchLinger = 5 * time.Millisecond
	cfg.SnapshotParallelism = 3
	c := e.newConnector(cfg, slowSink{e.client, 20 * time.Millisecond})
	i := 0
	m := e.startWrites(func() string {
		i++
		return fmt.Sprintf(`BEGIN; UPDATE users SET score = score + 1 WHERE id = %d;
INSERT INTO unpublished (payload) SELECT 'x' FROM generate_series(1, 2000); COMMIT; SELECT pg_sleep(0.01)`, i%3000+1)
	})
	e.run(c)
	e.waitLog("snapshot: incremental: complete", 60*time.Second)
	m.halt()
	e.waitConfirmed(e.currentLSN(), 30*time.Second)
	e.assertEqual("users", "users")
	e.assertEqual("items", "catalog_items")
}

// Chunks whose size is not the batch's are cut into batches at the
// bounds, each batch filled to BATCH_MAX_ROWS (or BATCH_MAX_BYTES) before
// it is sent: no request over a bound, and no more requests than the
// bounds make.
func TestIncremental_ChunksCutAtBatchBounds(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	for _, c := range []struct {
		name           string
		chunk, maxRows int
		maxBytes       int
	}{{"rows", 700, 500, 4 << 20}, {"bytes", 700, 5000, 16 << 10}} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, mixedPG, mixedFeldera)
			const rows = 12000
			e.exec(fmt.Sprintf("INSERT INTO users SELECT g, 'pre', g FROM generate_series(1, %d) g", rows))
			cfg := e.incrementalConfig("users", c.maxRows)
			cfg.SnapshotChunkRows = c.chunk
			cfg.BatchMaxBytes = c.maxBytes
			cfg.BatchLinger = time.Hour // only the bounds (and a table's end) send a batch
			e.start(cfg)
			e.waitLog("snapshot: incremental: complete", 60*time.Second)
			e.assertEqual("users", "users")
			var reqs, lines, bytes, most, widest int
			for _, r := range e.fel.Requests() {
				if r.Table != "users" || r.Lines == 0 {
					continue
				}
				reqs++
				lines, bytes = lines+r.Lines, bytes+r.Bytes
				most, widest = max(most, r.Lines), max(widest, r.Bytes)
			}
			line := 64 // an upper bound of one users line here
			if most > c.maxRows || widest > c.maxBytes+line {
				t.Fatalf("a request of %d lines or %d bytes: over BATCH_MAX_ROWS=%d or BATCH_MAX_BYTES=%d", most, widest, c.maxRows, c.maxBytes)
			}
			// Full batches, but for the table's last one (and a chunk
			// read again, which ends the batch its first read filled).
			if want := max((lines+c.maxRows-1)/c.maxRows, (bytes+c.maxBytes-1)/c.maxBytes); reqs > want+1 {
				t.Fatalf("%d requests for %d lines (%d bytes), where full batches make %d: batches not filled to the bounds (%d rows, %d bytes)", reqs, lines, bytes, want, c.maxRows, c.maxBytes)
			}
			t.Logf("%d requests for %d lines (%d bytes), the largest %d lines, %d bytes", reqs, lines, bytes, most, widest)
		})
	}
}
