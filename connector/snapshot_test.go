package connector_test

import (
	"context"

	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfeldera/pgfeldera/connector"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
	"github.com/pgfeldera/pgfeldera/state"
)

func (e *env) snapshotConfig(tables string) connector.Config {
	cfg := e.config(tables)
	cfg.SnapshotMode = connector.SnapshotInitial
	return cfg
}

// writer commits single-row inserts with fresh keys until stopped.
type writer struct {
	next atomic.Int64
	stop atomic.Bool
	wg   sync.WaitGroup
}

func (e *env) startWriter(table string, from int64) *writer {
	w := &writer{}
	w.next.Store(from)
	conn, err := pgx.Connect(context.Background(), e.dsn)
	if err != nil {
		e.t.Fatal(err)
	}
	w.wg.Add(1)
	// A test that fails before halting its writer must not leave it
	// writing (and reporting) after the test ended.
	e.t.Cleanup(func() { w.halt() })
	go func() {
		defer w.wg.Done()
		defer conn.Close(context.Background())
		for !w.stop.Load() {
			id := w.next.Add(1)
			if _, err := conn.Exec(context.Background(), fmt.Sprintf("INSERT INTO %s (id, name, score) VALUES ($1, 'live', 0)", table), id); err != nil {
				e.t.Errorf("writer: %v", err)
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	return w
}

func (w *writer) halt() int64 {
	w.stop.Store(true)
	w.wg.Wait()
	return w.next.Load()
}

func TestSnapshot_ConcurrentWritesExactlyOnce(t *testing.T) {
	pgcluster.EveryVersion(t)
	t.Parallel()
	e := newEnv(t, mixedPG, mixedFeldera)
	e.exec("INSERT INTO users SELECT g, 'pre', g FROM generate_series(1, 30000) g")
	e.exec("INSERT INTO items SELECT g, 'eu', g FROM generate_series(1, 30000) g")
	e.fel.SetCompletionDelay(20 * time.Millisecond) // make the snapshot take a while
	cfg := e.snapshotConfig("users,public.items:catalog_items")
	cfg.BatchMaxRows = 2000
	c := e.newConnector(cfg, e.client)
	var hooked atomic.Bool
	connector.SetAfterCopyHook(c, func() {
		// committed after the copy, before the stream starts: must come
		// through the stream, once
		e.execOwn("INSERT INTO users VALUES (500000, 'after copy', 0)")
		hooked.Store(true)
	})
	w := e.startWriter("users", 100000)
	e.run(c)
	e.waitLog("snapshot: complete", 60*time.Second)
	// keep writing into the stream for a while: 50 more rows
	mark := w.next.Load()
	e.poll("50 rows written after the snapshot", 30*time.Second, func() bool { return w.next.Load() >= mark+50 })
	last := w.halt()
	e.waitConfirmed(e.currentLSN(), 60*time.Second)
	e.assertEqual("users", "users")
	e.assertEqual("items", "catalog_items")
	if !hooked.Load() {
		t.Fatal("hook did not run")
	}
	counts := e.fel.InsertsByKey("users")
	for id := int64(100001); id <= last; id++ {
		if n := counts[fmt.Sprint(id)]; n != 1 {
			t.Fatalf("concurrently written key %d was inserted %d times", id, n)
		}
	}
	if n := counts["500000"]; n != 1 {
		t.Fatalf("key committed after the copy inserted %d times", n)
	}
	t.Logf("%d rows written concurrently with the snapshot, each delivered once", last-100000)
	st, err := state.Load(cfg.StateFile)
	if err != nil || !st.Complete() || st.Tables[0].Rows < 30000 {
		t.Fatalf("state = %+v, %v", st, err)
	}
}

// SNAPSHOT_MODE=inconsistent copies first and creates the slot after: the
// rows committed in between are lost, and the oracle sees it. initial does
// not lose them.
func TestSnapshot_InconsistentModeLoses(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	for _, mode := range []string{connector.SnapshotInconsistent, connector.SnapshotInitial} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t, mixedPG, mixedFeldera)
			e.exec("INSERT INTO users SELECT g, 'pre', g FROM generate_series(1, 1000) g")
			cfg := e.snapshotConfig("users,public.items:catalog_items")
			cfg.SnapshotMode = mode
			c := e.newConnector(cfg, e.client)
			connector.SetAfterCopyHook(c, func() {
				e.execOwn("INSERT INTO users SELECT g, 'between', 0 FROM generate_series(5001, 5010) g")
			})
			e.run(c)
			e.waitSlot()
			e.exec("INSERT INTO users VALUES (9999, 'later', 0)")
			e.waitConfirmed(e.currentLSN(), 30*time.Second)
			d := e.diff("users", "users")
			switch mode {
			case connector.SnapshotInconsistent:
				if strings.Count(d, "missing in feldera") != 10 {
					t.Fatalf("inconsistent mode: want the 10 rows committed between copy and slot reported missing, got:\n%s", d)
				}
			default:
				if d != "" {
					t.Fatal(d)
				}
			}
		})
	}
}

func TestSnapshot_StartupPlans(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	e := newEnv(t, mixedPG, mixedFeldera)
	e.exec("INSERT INTO users SELECT g, 'pre', g FROM generate_series(1, 1000) g")
	cfg := e.snapshotConfig("users,public.items:catalog_items")
	restart := func(t *testing.T) {
		t.Helper()
		sessions := strings.Count(e.logs.String(), "session: streaming")
		r := e.start(cfg)
		deadline := time.Now().Add(60 * time.Second)
		for strings.Count(e.logs.String(), "session: streaming") == sessions && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		e.waitConfirmed(e.currentLSN(), 30*time.Second)
		if err := r.stop(t); err != nil {
			t.Fatal(err)
		}
		e.assertEqual("users", "users")
		e.assertEqual("items", "catalog_items")
	}
	inserts := func() int { n, _ := e.requestedRows(); return n }

	t.Run("NoStateNoSlot_Snapshot", func(t *testing.T) {
		restart(t)
		if !strings.Contains(e.logs.String(), "startup: snapshot") {
			t.Fatal("no snapshot logged")
		}
	})
	t.Run("CompleteAndSlot_Stream", func(t *testing.T) {
		before := inserts()
		e.exec("UPDATE users SET name = 'streamed' WHERE id = 1")
		restart(t)
		if got := inserts() - before; got != 1 {
			t.Fatalf("a restart with a complete state re-sent %d inserts, want 1 (the update)", got)
		}
	})
	t.Run("SlotDroppedWhileStopped_Resnapshot", func(t *testing.T) {
		e.dropSlot(e.slot)
		e.exec("DELETE FROM users WHERE id <= 10")
		e.exec("UPDATE users SET name = 'changed while down' WHERE id BETWEEN 11 AND 20")
		restart(t)
	})
	t.Run("PendingState_RetractsRowsDeletedSince", func(t *testing.T) {
		st, err := state.Load(cfg.StateFile)
		if err != nil {
			t.Fatal(err)
		}
		st.Tables[0].Status = state.Pending // as if the snapshot had crashed
		state.Save(cfg.StateFile, st)
		// The slot is still there, so what Postgres deletes now reaches
		// Feldera through the stream whatever the state says. A row only
		// Feldera holds (as a crashed copy can leave) goes only if the
		// pending state makes the restart read users again and retract.
		e.fel.Put("users", `{"id": 888888, "name": "left by a crashed copy"}`)
		e.exec("DELETE FROM users WHERE id BETWEEN 21 AND 30")
		before := strings.Count(e.logs.String(), "startup: resnapshot")
		restart(t)
		if strings.Count(e.logs.String(), "startup: resnapshot") == before {
			t.Fatalf("a pending state did not resnapshot:\n%s", tail(e.logs.String(), 3000))
		}
	})
	t.Run("NoStateButSlot_Resnapshot", func(t *testing.T) {
		os.Remove(cfg.StateFile)
		e.fel.Put("users", `{"id": 777777, "name": "leftover"}`)
		restart(t)
	})
	t.Run("MappingChanged_Resnapshot", func(t *testing.T) {
		st, _ := state.Load(cfg.StateFile)
		st.Tables[1].Dest = "old_items"
		state.Save(cfg.StateFile, st)
		e.fel.Put("catalog_items", `{"sku": 1, "region": "gone"}`)
		restart(t)
	})
	t.Run("FelderaRedeployedWhileStopped_Resnapshot", func(t *testing.T) {
		e.fel.Restart() // no fault tolerance: everything is gone
		restart(t)
	})
}

func TestSnapshot_BadStateFileIsFatal(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	for name, content := range map[string]string{
		"corrupt":        `{"version":1,"slot":"s",`,
		"unknownVersion": `{"version":7,"slot":"s","publication":"pub","tables":[]}`,
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, mixedPG, mixedFeldera)
			cfg := e.snapshotConfig("users,public.items:catalog_items")
			os.WriteFile(cfg.StateFile, []byte(content), 0o600)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err := e.newConnector(cfg, e.client).Run(ctx)
			if err == nil || !strings.Contains(err.Error(), cfg.StateFile) {
				t.Fatalf("err = %v, want a fatal error naming %s", err, cfg.StateFile)
			}
			if b, _ := os.ReadFile(cfg.StateFile); string(b) != content {
				t.Fatal("the state file was changed")
			}
		})
	}
}

// A Feldera redeploy under a running connector, for every form of
// runtime_config.fault_tolerance Feldera accepts. Without fault tolerance
// (absent, null, {"model": "none"}) the double empties its tables, as
// Feldera does, and only a resnapshot makes it exact again; {"model":
// "none"} was once read as fault tolerant and never resnapshotted. With
// it ({} and the legacy strings mean exactly_once) completed state
// survives and the connector streams on.
func TestSnapshot_FelderaRestartWhileStreaming(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	for _, c := range []struct{ name, ft string }{
		{"absent", ""},
		{"null", "null"},
		{"model_none", `{"model": "none", "checkpoint_interval_secs": 60}`},
		{"empty_object", "{}"},
		{"legacy_string", `"latest_checkpoint"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnvOn(t, pgcluster.Shared(t), mixedPG, mixedFeldera, func(cfg *felderatest.Config) { cfg.FaultTolerance = c.ft })
			e.exec("INSERT INTO users SELECT g, 'pre', g FROM generate_series(1, 2000) g")
			e.start(e.snapshotConfig("users,public.items:catalog_items"))
			e.waitSlot()
			e.exec("INSERT INTO users SELECT g, 'streamed', g FROM generate_series(3000, 3100) g")
			e.waitConfirmed(e.currentLSN(), 30*time.Second)
			e.assertEqual("users", "users")
			ft := c.ft == "{}" || c.ft == `"latest_checkpoint"`
			e.fel.Restart() // a new deployment: without fault tolerance everything acknowledged so far is gone
			if got := len(e.fel.Rows("users")); !ft && got != 0 || ft && got != 2101 {
				t.Fatalf("after the redeploy the double holds %d rows", got)
			}
			e.exec("INSERT INTO users VALUES (5000, 'after restart', 0)")
			e.waitLog("redeployed", 30*time.Second)
			e.eventuallyEqual("users", "users", 60*time.Second)
			if want := map[bool]string{true: "has fault tolerance", false: "has no fault tolerance"}[ft]; !strings.Contains(e.logs.String(), want) {
				t.Fatalf("the log does not say the pipeline %s\n%s", want, tail(e.logs.String(), 2000))
			}
			resnapshot := strings.Contains(e.logs.String(), "startup: resnapshot")
			if resnapshot == ft {
				t.Fatalf("fault tolerant %v, resnapshotted %v\n%s", ft, resnapshot, tail(e.logs.String(), 3000))
			}
		})
	}
}

// A slot whose WAL was removed (wal_status lost) is a lost stream: resnapshot.
func TestSnapshot_LostSlotResnapshots(t *testing.T) {
	pgcluster.EveryVersion(t)
	t.Parallel()
	cluster := pgcluster.New(t, pgcluster.Options{Settings: pgcluster.LoseSlotSettings})
	e := newEnvOn(t, cluster, mixedPG, mixedFeldera, nil)
	e.exec("INSERT INTO users SELECT g, 'pre', g FROM generate_series(1, 500) g")
	cfg := e.snapshotConfig("users,public.items:catalog_items")
	r := e.start(cfg)
	e.waitSlot()
	e.waitConfirmed(e.currentLSN(), 30*time.Second)
	r.stop(t)
	e.exec("DELETE FROM users WHERE id <= 100") // its WAL will be gone
	if err := cluster.LoseSlot(context.Background(), e.db.Config().Database, e.slot); err != nil {
		t.Fatal(err)
	}
	e.start(cfg)
	e.eventuallyEqual("users", "users", 60*time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(e.logs.String(), "resnapshot with retraction") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(e.logs.String(), "resnapshot with retraction") {
		t.Fatalf("no resnapshot after the slot was lost\n%s", tail(e.logs.String(), 3000))
	}
}
