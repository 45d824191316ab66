package connector_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/pgfeldera/pgfeldera/connector"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
)

// The program after the change: catalog_items gains a column, so Feldera
// bootstraps it (starts it empty); users is unchanged and keeps its rows.
const changedFeldera = `
CREATE TABLE users (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR, score INT);
CREATE TABLE catalog_items (sku INT NOT NULL, region VARCHAR NOT NULL, price DECIMAL(10,2), note VARCHAR, PRIMARY KEY (sku, region));`

// A program change under fault tolerance, with a steady writer: the
// modified table is read again (alone: users' snapshot rows are not sent
// twice) while the stream goes on, and both tables end exact. Under
// exactly_once the change discarded Feldera's journal: a restart before
// the next checkpoint rolls back to the stop's checkpoint, and only what
// a checkpoint covered may have been acknowledged meanwhile. Trusting the
// restored pipeline leaves catalog_items empty.
func TestRestore_ProgramChangeReadsTheModifiedTable(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	for _, c := range []struct {
		name, ft             string
		restartInGap, unsafe bool
	}{
		{"at_least_once", `{"model": "at_least_once", "checkpoint_interval_secs": 1}`, false, false},
		{"exactly_once", `{"model": "exactly_once", "checkpoint_interval_secs": null}`, true, false},
		{"at_least_once_trusted_UNSAFE", `{"model": "at_least_once", "checkpoint_interval_secs": 1}`, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnvOn(t, pgcluster.Shared(t), mixedPG, mixedFeldera, func(fc *felderatest.Config) { fc.FaultTolerance = c.ft })
			e.exec("INSERT INTO users SELECT g, 'pre', g FROM generate_series(1, 500) g")
			e.exec("INSERT INTO items SELECT g, 'eu', g FROM generate_series(1, 300) g")
			cfg := e.snapshotConfig("users,public.items:catalog_items")
			cfg.CheckpointAfter = time.Second
			e.snapshotted(cfg, c.unsafe)
			w := e.startWriter("users", 100000)
			e.waitConfirmed(e.currentLSN(), 60*time.Second)
			cleared, err := e.fel.ChangeProgram(changedFeldera)
			if err != nil || len(cleared) != 1 || cleared[0] != "catalog_items" {
				t.Fatalf("ChangeProgram: cleared %v, %v", cleared, err)
			}
			if n := e.fel.Len("catalog_items"); n != 0 {
				t.Fatalf("the double kept %d rows of the modified table: the test could not see a loss", n)
			}
			e.exec("INSERT INTO items VALUES (1000, 'us', 1)")
			if c.restartInGap {
				time.Sleep(500 * time.Millisecond) // completed, acknowledged only if a checkpoint covered it
				e.fel.RestartInPlace()
			}
			time.Sleep(500 * time.Millisecond)
			w.halt()
			e.waitConfirmed(e.currentLSN(), 60*time.Second)
			if c.unsafe {
				if d := e.diff("items", "catalog_items"); d == "" {
					t.Fatal("trusting the restored pipeline lost nothing: the test cannot see a loss")
				}
				return
			}
			e.eventuallyEqual("items", "catalog_items", 60*time.Second)
			e.eventuallyEqual("users", "users", 60*time.Second)
			if !strings.Contains(e.logs.String(), `the definition of a Feldera table changed`) || !strings.Contains(e.logs.String(), `table=catalog_items`) {
				t.Fatalf("the modified table was not read again by itself\n%s", tail(e.logs.String(), 3000))
			}
			if strings.Contains(e.logs.String(), "startup: resnapshot") {
				t.Fatalf("every table was resnapshotted, not only the modified one\n%s", tail(e.logs.String(), 3000))
			}
			by := e.fel.InsertsByKey("users")
			for id := 1; id <= 500; id++ { // the snapshot's keys (the writer's start at 100001)
				if n := by[fmt.Sprint(id)]; n != 1 {
					t.Fatalf("users %d was sent %d times: users was read again", id, n)
				}
			}
		})
	}
}

// A fault-tolerant Feldera that comes back with less than it had, under a
// steady writer: restarted in place with an empty store (a pod recreated
// with a new volume), and restarted from an older checkpoint (storage
// rolled back). Either way the checkpoint that held what was acknowledged
// is gone, and the start resnapshots, saying why. Trusting the restore
// loses the rows acknowledged between the two checkpoints.
func TestRestore_LessThanAcknowledged(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	for _, c := range []struct {
		name    string
		restart func(*felderatest.Server) error
		unsafe  bool
	}{
		{"empty_store", func(s *felderatest.Server) error { s.RestartEmptyStore(); return nil }, false},
		{"older_checkpoint", func(s *felderatest.Server) error { return s.RestartFromOlder(1) }, false},
		{"older_checkpoint_trusted_UNSAFE", func(s *felderatest.Server) error { return s.RestartFromOlder(1) }, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnvOn(t, pgcluster.Shared(t), mixedPG, mixedFeldera, func(fc *felderatest.Config) {
				fc.FaultTolerance = `{"model": "at_least_once", "checkpoint_interval_secs": null}`
			})
			e.exec("INSERT INTO users SELECT g, 'pre', g FROM generate_series(1, 300) g")
			cfg := e.snapshotConfig("users,public.items:catalog_items")
			cfg.CheckpointAfter = time.Hour // the test takes the checkpoints
			conn := e.snapshotted(cfg, c.unsafe)
			w := e.startWriter("users", 100000)
			time.Sleep(200 * time.Millisecond)
			if err := e.fel.Checkpoint(); err != nil { // C1
				t.Fatal(err)
			}
			e.exec("INSERT INTO users SELECT g, 'b', g FROM generate_series(900001, 900100) g")
			target := e.currentLSN()
			e.poll("B to complete", 30*time.Second, func() bool {
				for _, r := range e.fel.Rows("users") {
					if string(r["id"]) == "900100" {
						return true
					}
				}
				return false
			})
			time.Sleep(100 * time.Millisecond)
			if err := e.fel.Checkpoint(); err != nil { // C2: the only one that holds B
				t.Fatal(err)
			}
			e.waitConfirmed(target, 30*time.Second) // B acknowledged
			if err := c.restart(e.fel); err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond)
			w.halt()
			// Checkpoints of the restarted process only once pgfeldera
			// saw the restart: one taken before would hold what it sent
			// meanwhile (DURABILITY.md, restores).
			e.poll("the restart noticed", 30*time.Second, func() bool { return conn.Stats().Sessions.Load() >= 2 })
			e.poll("the writes acknowledged", 60*time.Second, func() bool {
				target := e.currentLSN()
				e.fel.Checkpoint()
				time.Sleep(50 * time.Millisecond)
				return e.confirmed() >= target
			})
			if c.unsafe {
				if d := e.diff("users", "users"); d == "" {
					t.Fatal("trusting the restore lost nothing: the test cannot see a loss")
				}
				return
			}
			e.eventuallyEqual("users", "users", 60*time.Second)
			logs := e.logs.String()
			if !strings.Contains(logs, "Feldera lists no checkpoint") && !strings.Contains(logs, "Feldera restored an older checkpoint") {
				t.Fatalf("the resnapshot does not say what the restart restored\n%s", tail(logs, 3000))
			}
		})
	}
}

// Batches completed after the last checkpoint; Feldera restarts in place
// (restoring that checkpoint: the batches are gone) while /stats fails for
// 10 s, so the restart cannot be seen; new steps of another input run, and a
// checkpoint of the new process is taken whose step number is past the
// lost batches' (a restore resumes the step counter). That checkpoint
// covers nothing this session completed: the slot must not pass the lost
// batches. Trusting the checkpoint list acknowledges them.
func TestRestore_CheckpointOfAnotherProcessCoversNothing(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	for _, unsafe := range []bool{false, true} {
		t.Run(map[bool]string{false: "incarnation_checked", true: "trusted_UNSAFE"}[unsafe], func(t *testing.T) {
			e := newEnvOn(t, pgcluster.Shared(t), mixedPG, mixedFeldera+`
CREATE TABLE side (id BIGINT NOT NULL PRIMARY KEY, v VARCHAR);`, func(fc *felderatest.Config) {
				fc.FaultTolerance = `{"model": "at_least_once", "checkpoint_interval_secs": null}`
				fc.StepTime = -1
			})
			cfg := e.snapshotConfig("users,public.items:catalog_items")
			cfg.CheckpointAfter = time.Hour // checkpoints only when the test takes them
			conn := e.newConnector(cfg, e.client)
			if unsafe {
				connector.TrustCheckpoints(conn)
			}
			e.run(conn)
			e.waitSlot()
			e.waitLog("snapshot: complete", 60*time.Second)
			e.exec("INSERT INTO users VALUES (1, 'a', 1)")
			e.poll("the insert to complete", 30*time.Second, func() bool { return e.fel.Len("users") == 1 })
			if err := e.fel.Checkpoint(); err != nil {
				t.Fatal(err)
			}
			e.waitConfirmed(e.currentLSN(), 30*time.Second)
			// The slot may move past what it confirms now without loss:
			// the cluster is shared, and a quiet keepalive releases other
			// databases' WAL. It must not pass the first lost batch's
			// COMMIT, which ends at or below firstLost.
			var firstLost pglogrepl.LSN
			for i := 2; i <= 6; i++ {
				e.exec(fmt.Sprintf("INSERT INTO users VALUES (%d, 'lost', %d)", i, i))
				if i == 2 {
					firstLost = e.currentLSN()
				}
			}
			covered := firstLost
			e.poll("five batches to complete", 30*time.Second, func() bool { return e.fel.Len("users") == 6 })
			// The connector sees every batch complete before the restart:
			// a token polled after it answers 410, and the session ends
			// before trusting any checkpoint.
			lostAt := e.fel.Steps()
			e.poll("the connector to see the batches complete", 30*time.Second, func() bool { return connector.CompletedStep(conn) >= lostAt })
			e.fel.InjectFault(felderatest.Fault{Kind: felderatest.FailStatus, Path: "stats"})
			e.fel.RestartInPlace()
			// Another input's steps, one request at a time until the step
			// counter passes the lost batches': requests sent together
			// may be fed in one step, so a fixed count of them need not.
			for i := 0; e.fel.Steps() <= lostAt; i++ {
				before := e.fel.Steps()
				if _, err := e.client.Ingress(context.Background(), "side", []byte(fmt.Sprintf(`{"insert":{"id":%d}}`, i))); err != nil {
					t.Fatal(err)
				}
				e.poll("a step of the other input", 10*time.Second, func() bool { return e.fel.Steps() > before })
			}
			if err := e.fel.Checkpoint(); err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) { // the outage
				if got := e.confirmed(); got > covered {
					if unsafe {
						t.Logf("trusted: the slot passed the lost batches (%s > %s)", got, covered)
						return
					}
					t.Fatalf("the slot moved from %s to %s over batches Feldera lost", covered, got)
				}
			}
			if unsafe {
				t.Fatal("trusting the checkpoint list acknowledged nothing lost: the test cannot see a loss")
			}
			e.fel.ClearFaults()
			e.poll("the restart noticed", 30*time.Second, func() bool { return conn.Stats().Sessions.Load() >= 2 })
			e.poll("the replay acknowledged", 60*time.Second, func() bool {
				e.fel.Checkpoint()
				time.Sleep(50 * time.Millisecond)
				return e.confirmed() >= e.currentLSN()
			})
			e.assertEqual("users", "users")
		})
	}
}

// A checkpoint that fails after POST /checkpoint answered 200: the
// failure is read from /checkpoint_status, counted, and /readyz turns 503
// naming it; the session keeps streaming, and once completed work has
// waited NO_PROGRESS_TIMEOUT for a checkpoint the process stops (exit 1),
// instead of retaining WAL without bound.
func TestRestore_CheckpointFailureIsLoud(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	e := newEnvOn(t, pgcluster.Shared(t), mixedPG, mixedFeldera, func(fc *felderatest.Config) {
		fc.FaultTolerance = `{"model": "at_least_once", "checkpoint_interval_secs": null}`
	})
	cfg := e.config("users,public.items:catalog_items")
	cfg.CheckpointAfter = 300 * time.Millisecond
	cfg.NoProgressTimeout = 8 * time.Second
	conn := e.newConnector(cfg, e.client)
	r := e.run(conn)
	e.waitSlot()
	e.fel.FailCheckpoints("No space left on device")
	e.exec("INSERT INTO users VALUES (1, 'a', 1)")
	e.poll("the failure reported", 60*time.Second, func() bool {
		ready, why := conn.Ready()
		return !ready && strings.Contains(why, "No space left on device") && conn.Stats().CheckpointFailures.Load() > 0
	})
	var err error
	select {
	case err = <-r.done:
		r.done <- err
	case <-time.After(60 * time.Second):
		t.Fatal("the process kept running with checkpoints failing")
	}
	if !errors.Is(err, connector.ErrNoProgress) || !strings.Contains(err.Error(), "No space left on device") {
		t.Fatalf("want a no-progress stop naming the checkpoint failure, got %v", err)
	}
	if n := conn.Stats().Sessions.Load(); n != 1 {
		t.Fatalf("%d sessions: the stop must come from the session that kept streaming", n)
	}
}

// snapshotted runs a connector with cfg until its snapshot is complete;
// unsafe makes it trust what a restart restored.
func (e *env) snapshotted(cfg connector.Config, unsafe bool) *connector.Connector {
	e.t.Helper()
	conn := e.newConnector(cfg, e.client)
	if unsafe {
		connector.TrustRestores(conn)
	}
	e.run(conn)
	e.waitSlot()
	e.waitLog("snapshot: complete", 60*time.Second)
	return conn
}

// A fault-tolerant pipeline that reports no checkpoint can succeed
// (/stats permanent_checkpoint_errors: no storage, an input connector
// that cannot suspend) is refused at the start, naming the reason and
// the fix: under at_least_once nothing it completes could ever be
// acknowledged, which the run otherwise found only at
// NO_PROGRESS_TIMEOUT. The same pipeline without the errors starts.
func TestRestore_PipelineThatCannotCheckpointIsRefused(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	e := newEnvOn(t, pgcluster.Shared(t), mixedPG, mixedFeldera, func(fc *felderatest.Config) {
		fc.FaultTolerance = `{"model": "at_least_once", "checkpoint_interval_secs": 1}`
	})
	e.fel.SetPermanentCheckpointErrors(`"StorageRequired"`, `{"UnsupportedInputEndpoint": "kafka_in"}`)
	r := e.start(e.snapshotConfig("users"))
	e.refusal(r, "a pipeline that cannot checkpoint", 30*time.Second, "StorageRequired", "kafka_in", "no checkpoint can succeed",
		"runtime_config.storage", "input connector kafka_in cannot checkpoint")
	e.fel.SetPermanentCheckpointErrors()
	r = e.start(e.snapshotConfig("users"))
	e.waitSlot()
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}
