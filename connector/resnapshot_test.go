package connector_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/internal/pgcluster"

	"github.com/pgfeldera/pgfeldera/connector"
	"github.com/pgfeldera/pgfeldera/incremental"
	"github.com/pgfeldera/pgfeldera/state"
)

// requestResnapshot writes a resnapshot request into the stream, as
// `pgfeldera resnapshot` does.
func (e *env) requestResnapshot(id string, tables ...string) {
	e.t.Helper()
	prefix, content := incremental.ResnapshotMessage(e.slot, id, tables)
	e.exec(fmt.Sprintf("SELECT pg_logical_emit_message(true, '%s', '%s')", prefix, strings.ReplaceAll(content, "'", "''")))
}

// waitRequest waits until the state file marks request id done.
func (e *env) waitRequest(stateFile, id string, within time.Duration) *state.State {
	e.t.Helper()
	var st *state.State
	e.poll("resnapshot request "+id+" done", within, func() bool {
		var err error
		st, err = state.Load(stateFile)
		if err != nil {
			return false
		}
		r := st.Request(id)
		if r != nil && r.Refused != "" {
			e.t.Fatalf("request %s refused: %s", id, r.Refused)
		}
		return r != nil && r.Done
	})
	return st
}

// The retraction alone, with ghosts planted in Feldera and, in each
// batch's window, one absent key inserted into Postgres after the batch
// found it absent: the window drops that key's delete (the stream's
// insert is newer), so the retraction leaves Feldera exact. With the
// window disabled the delete lands after the insert and the row is lost,
// so the test sees a loss.
func TestResnapshot_RetractionWindow(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	for _, unsafe := range []bool{false, true} {
		name := "window"
		if unsafe {
			name = "noWindow"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, mixedPG, mixedFeldera)
			e.exec("INSERT INTO users SELECT g, 'pre', g FROM generate_series(1, 3000) g")
			cfg := e.config("users,public.items:catalog_items")
			cfg.SnapshotMode = connector.SnapshotInitial
			cfg.BatchMaxRows = 100
			c := e.newConnector(cfg, e.client)
			connector.RetractOnly(c)
			if unsafe {
				connector.DisableChunkWindow(c)
			}
			var revived atomic.Int64
			connector.SetRetractReadHook(c, func(table string, absent []string) {
				if table == "public.users" {
					e.execOwn(fmt.Sprintf("INSERT INTO users VALUES (%s, 'revived', 0)", absent[0]))
					revived.Add(1)
				}
			})
			e.run(c)
			e.waitLog("session: streaming", 60*time.Second)
			e.waitConfirmed(e.currentLSN(), 60*time.Second)
			for i := 1; i <= 300; i++ {
				if err := e.fel.Put("users", fmt.Sprintf(`{"id": %d, "name": "ghost", "score": 0}`, 5000+i)); err != nil {
					t.Fatal(err)
				}
			}
			e.requestResnapshot("r1", "public.users")
			e.waitLog("resnapshot: retraction done", 60*time.Second)
			e.waitConfirmed(e.currentLSN(), 60*time.Second)
			d := e.diff("users", "users")
			if revived.Load() == 0 {
				t.Fatal("no retraction batch found a key absent: nothing was planted")
			}
			if unsafe {
				if d == "" {
					t.Fatal("with every delete kept, the keys inserted in the window should be missing from Feldera: the test cannot see a loss")
				}
				t.Logf("without the window: %d lines of difference, e.g. %s", strings.Count(d, "\n"), firstLine(d))
				return
			}
			if d != "" {
				t.Fatal(d)
			}
			st, err := state.Load(cfg.StateFile)
			if err != nil || st.Tables[0].Retract || st.Tables[0].Request != "r1" || st.Tables[0].Retracted < 300-revived.Load() {
				t.Fatalf("state = %+v, %v", st, err)
			}
			t.Logf("%d ghosts, %d revived in a batch's window; %d deleted", 300, revived.Load(), st.Tables[0].Retracted)
		})
	}
}

// A whole resnapshot of a drifted table (ghosts, changed rows, removed
// rows in Feldera) under a writer to the same table: the request is done,
// Feldera exact, items untouched, and the same request seen again (a
// replay of the stream) is not taken a second time.
func TestResnapshot_ExactUnderWrites(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	e := newEnv(t, mixedPG, mixedFeldera)
	const rows = 10000
	e.exec(fmt.Sprintf("INSERT INTO users SELECT g, 'pre', g FROM generate_series(1, %d) g", rows))
	e.exec("INSERT INTO items SELECT g, 'eu', g FROM generate_series(1, 300) g")
	e.fel.SetCompletionDelay(5 * time.Millisecond)
	cfg := e.config("users,public.items:catalog_items")
	cfg.SnapshotMode = connector.SnapshotInitial
	cfg.BatchMaxRows = 500
	c := e.newConnector(cfg, e.client)
	var planted atomic.Int64
	connector.SetChunkReadHook(c, func(table string, keys []string) {
		if table == "public.users" && len(keys) >= 2 {
			e.execOwn(fmt.Sprintf("UPDATE users SET name = 'in window' WHERE id = %s", keys[0]))
			e.execOwn(fmt.Sprintf("DELETE FROM users WHERE id = %s", keys[1]))
			planted.Add(1)
		}
	})
	e.run(c)
	e.waitLog("session: streaming", 60*time.Second)
	e.waitConfirmed(e.currentLSN(), 60*time.Second)
	for i := 1; i <= 40; i++ {
		for _, err := range []error{
			e.fel.Put("users", fmt.Sprintf(`{"id": %d, "name": "ghost", "score": 0}`, rows+5000+i)),
			e.fel.Put("users", fmt.Sprintf(`{"id": %d, "name": "changed", "score": -1}`, i*13)),
			e.fel.Delete("users", fmt.Sprintf(`{"id": %d, "name": "pre", "score": %d}`, i*17+1, i*17+1)),
		} {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	if e.diff("users", "users") == "" {
		t.Fatal("the planted drift is not visible")
	}
	itemsBefore := len(e.fel.Rows("catalog_items"))
	m := e.startMutator("users", rows+2000, 9)
	e.requestResnapshot("r2", "public.users")
	st := e.waitRequest(cfg.StateFile, "r2", 120*time.Second)
	ops := m.halt()
	e.waitConfirmed(e.currentLSN(), 60*time.Second)
	e.assertEqual("users", "users")
	e.assertEqual("items", "catalog_items")
	if n := len(e.fel.Rows("catalog_items")); n != itemsBefore {
		t.Fatalf("items changed from %d to %d rows", itemsBefore, n)
	}
	if planted.Load() == 0 || st.Tables[0].Status != state.Complete || st.Tables[1].Request != "" {
		t.Fatalf("planted %d; state %+v", planted.Load(), st)
	}
	// The same request again, as a replay of the stream would deliver it.
	e.requestResnapshot("r2", "public.users")
	e.waitLog("resnapshot: request already taken", 30*time.Second)
	if n := strings.Count(e.logs.String(), "resnapshot: request received"); n != 1 {
		t.Fatalf("the request was taken %d times", n)
	}
	t.Logf("%d concurrent writes; %d chunks with changes planted in their window; %d chunks", ops, planted.Load(), st.Tables[0].Chunks)
}

// Requests the connector cannot carry out are refused in the state file,
// naming why, and the connector keeps streaming.
func TestResnapshot_Refused(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	e := newEnv(t, `CREATE TABLE users (id bigint PRIMARY KEY, name text, score int);
CREATE TABLE logs (line text);
ALTER TABLE logs REPLICA IDENTITY FULL;
CREATE PUBLICATION pub FOR TABLE users, logs;`, `CREATE TABLE users (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR, score INT);
CREATE TABLE logs (line VARCHAR) WITH ('materialized' = 'true');`)
	cfg := e.config("users,logs")
	cfg.SnapshotMode = connector.SnapshotInitial
	cfg.RequirePrimaryKey = false
	e.start(cfg)
	e.waitLog("session: streaming", 60*time.Second)
	e.requestResnapshot("bad1", "public.logs")
	e.requestResnapshot("bad2", "public.nosuch")
	e.exec("INSERT INTO users VALUES (1, 'after', 1)")
	e.eventuallyEqual("users", "users", 30*time.Second)
	st, err := state.Load(cfg.StateFile)
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{"bad1": "has no PRIMARY KEY", "bad2": "table public.nosuch is not one this connector streams"} {
		r := st.Request(id)
		if r == nil || !strings.Contains(r.Refused, want) {
			t.Fatalf("request %s: %+v, want refused with %q", id, r, want)
		}
	}
	if st.Tables[1].Status != state.Complete {
		t.Fatalf("the refused request changed the state: %+v", st.Tables[1])
	}
}

// A request for a table whose incremental snapshot is under way starts it
// again from its beginning, retraction first: the session restarts (the
// state already says so), the replayed request is not taken twice, and
// the table ends exact.
func TestResnapshot_TableBeingRead(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	e := newEnv(t, mixedPG, mixedFeldera)
	e.exec("INSERT INTO users SELECT g, 'pre', g FROM generate_series(1, 5000) g")
	cfg := e.config("users,public.items:catalog_items")
	cfg.SnapshotMode = connector.SnapshotIncremental
	cfg.BatchMaxRows = 200
	cfg.SnapshotChunkRows = 200
	c := e.newConnector(cfg, e.client)
	var chunks atomic.Int64
	connector.SetChunkReadHook(c, func(table string, keys []string) {
		if table == "public.users" && chunks.Add(1) < 20 {
			time.Sleep(20 * time.Millisecond) // keep the first snapshot going
		}
	})
	e.run(c)
	e.poll("a few chunks", 30*time.Second, func() bool { return chunks.Load() >= 3 })
	if err := e.fel.Put("users", `{"id": 99999, "name": "ghost", "score": 0}`); err != nil {
		t.Fatal(err)
	}
	e.requestResnapshot("busy", "public.users")
	st := e.waitRequest(cfg.StateFile, "busy", 60*time.Second)
	e.waitConfirmed(e.currentLSN(), 60*time.Second)
	e.assertEqual("users", "users")
	logs := e.logs.String()
	if !strings.Contains(logs, "whose incremental snapshot is under way: the session restarts") || strings.Count(logs, "resnapshot: request received") != 1 {
		t.Fatalf("the request did not restart the table's snapshot once:\n%s", tail(logs, 3000))
	}
	if st.Tables[0].Status != state.Complete || st.Tables[0].Request != "busy" {
		t.Fatalf("state %+v", st.Tables[0])
	}
}
