package connector_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/connector"
	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
	"github.com/pgfeldera/pgfeldera/state"
)

// workload commits a few transactions touching both tables.
func (e *env) workload(round int) {
	base := round * 1000
	e.execOwn(fmt.Sprintf("INSERT INTO users SELECT g, 'r%d', g FROM generate_series(%d, %d) g", round, base, base+99))
	e.execOwn(fmt.Sprintf("UPDATE users SET score = -1 WHERE id BETWEEN %d AND %d", base, base+9))
	e.execOwn(fmt.Sprintf("DELETE FROM users WHERE id BETWEEN %d AND %d", base+10, base+14))
	e.execOwn(fmt.Sprintf("UPDATE users SET id = id + 500 WHERE id = %d", base+20))
	e.execOwn(fmt.Sprintf("INSERT INTO items SELECT g, 'r%d', 1.25 FROM generate_series(%d, %d) g", round, base, base+9))
}

func (e *env) settle(within time.Duration) {
	e.t.Helper()
	e.waitConfirmed(e.currentLSN(), within)
	e.eventuallyEqual("users", "users", 10*time.Second)
	e.eventuallyEqual("items", "catalog_items", 10*time.Second)
}

// Each fault is shown to have fired (the double served it, the walsender
// was terminated) and to have cost a session (the connector reconnected),
// and the tables end equal anyway.
func TestFaults(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	faults(t, []faultCase{
		{"Feldera503For20s", func(e *env) {
			e.fel.InjectFault(felderatest.Fault{Kind: felderatest.FailStatus, Path: "ingress", Status: 503})
			e.workload(1)
			// The outage lasts until the connector was refused five
			// times: it kept retrying (fenced, backed off) throughout.
			e.poll("five 503s served", 60*time.Second, func() bool { return e.fel.Served(felderatest.FailStatus) >= 5 })
			e.fel.ClearFaults()
			e.workload(2)
		}, func(e *env) string { return served(e, felderatest.FailStatus, 5) }, 0},
		{"FelderaHangsPastClientTimeout", func(e *env) {
			e.fel.InjectFault(felderatest.Fault{Kind: felderatest.Hang, Path: "ingress"})
			e.workload(1)
			e.waitLog("push ", 40*time.Second) // the client's request timeout (10 s) gave up on the hang
			e.fel.ClearFaults()
			e.workload(2)
		}, func(e *env) string { return served(e, felderatest.Hang, 1) }, 10 * time.Second},
		{"CompletionHeld30s", func(e *env) {
			e.fel.HoldCompletion(true)
			e.workload(1)
			// FELDERA_COMPLETION_TIMEOUT (30 s) ended the session. Which
			// message says so depends on how the workload was batched:
			// "batch N on T not complete after" when each batch held one
			// table, "transaction N has not taken its input" when a batch
			// held both and FELDERA_TRANSACTIONS=auto wrapped it.
			e.waitLog("(FELDERA_COMPLETION_TIMEOUT", 60*time.Second)
			e.fel.HoldCompletion(false)
			e.workload(2)
		}, nil, 0},
		{"ConnectionDroppedMidPost", func(e *env) {
			e.fel.InjectFault(felderatest.Fault{Kind: felderatest.Drop, Path: "ingress", Count: 3})
			e.fel.InjectFault(felderatest.Fault{Kind: felderatest.PartialThen503, Path: "ingress", Count: 2})
			e.workload(1)
			e.workload(2)
		}, func(e *env) string {
			if m := served(e, felderatest.Drop, 3); m != "" {
				return m
			}
			return served(e, felderatest.PartialThen503, 2)
		}, 0},
	})
}

// How the server ends a replication connection, and what the client
// reads then, is the server's: this case runs on every version. It ends
// only its own slot's walsender, so other tests share the cluster.
func TestFaults_WalSenderTerminated(t *testing.T) {
	pgcluster.EveryVersion(t)
	t.Parallel()
	faults(t, []faultCase{{"WalSenderTerminated", func(e *env) {
		e.workload(1)
		e.terminateWalSender()
		e.workload(2)
	}, nil, 0}})
}

type faultCase struct {
	name    string
	during  func(e *env)
	fired   func(e *env) string // "" when the fault demonstrably happened
	timeout time.Duration       // the client's request timeout, if not the harness's
}

// faults runs each case against its own connector: the fault must end a
// streaming session, and the tables end equal anyway.
func faults(t *testing.T, cases []faultCase) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, mixedPG, mixedFeldera)
			cfg := e.config("users,public.items:catalog_items")
			cfg.SnapshotMode = "initial"
			client := e.client
			if c.timeout != 0 {
				client = e.newClient(c.timeout)
			}
			conn := e.newConnector(cfg, client)
			e.run(conn)
			e.waitSlot()
			// The faults are meant to end a streaming session: one that
			// hits the startup (a walsender terminated during the copy)
			// ends an attempt that never counted as a session (the CI of
			// stop 31 failed on that race).
			e.waitLog("session: streaming", 60*time.Second)
			c.during(e)
			e.settle(120 * time.Second)
			if c.fired != nil {
				if msg := c.fired(e); msg != "" {
					t.Fatal(msg)
				}
			}
			if n := conn.Stats().Sessions.Load(); n < 2 {
				t.Fatalf("%d sessions: the fault did not end one", n)
			}
		})
	}
}

func served(e *env, k felderatest.FaultKind, want int) string {
	if n := e.fel.Served(k); n < want {
		return fmt.Sprintf("fault kind %d served %d times, want at least %d", k, n, want)
	}
	return ""
}

func TestFaults_PostgresImmediateRestart(t *testing.T) {
	pgcluster.EveryVersion(t)
	t.Parallel()
	cluster := pgcluster.New(t, pgcluster.Options{})
	e := newEnvOn(t, cluster, mixedPG, mixedFeldera, nil)
	cfg := e.config("users,public.items:catalog_items")
	e.start(cfg)
	e.waitSlot()
	e.workload(1)
	e.db.Close(context.Background())
	if err := cluster.Restart(true); err != nil {
		t.Fatal(err)
	}
	e.reconnectDB()
	e.workload(2)
	e.settle(120 * time.Second)
}

// A graceful stop after a workload leaves nothing to redeliver; an abrupt
// one (the connector killed without its final status) redelivers only what
// came after the last acknowledgement.
func TestGracefulStopRedeliversNothing(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	e := newEnv(t, mixedPG, mixedFeldera)
	cfg := e.config("users,public.items:catalog_items")
	r := e.start(cfg)
	e.waitSlot()
	e.workload(1)
	e.workload(2)
	e.waitConfirmed(e.currentLSN(), 30*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	before := len(e.fel.Requests())
	ins, del := e.requestedRows()
	r = e.start(cfg)
	e.waitSlot()
	// A marker transaction after the restart: once it is acknowledged,
	// anything the restart redelivered would have arrived before it.
	e.exec("INSERT INTO users VALUES (999999, 'marker', 0)")
	e.waitConfirmed(e.currentLSN(), 30*time.Second)
	ins2, del2 := e.requestedRows()
	ins2--
	if n := len(e.fel.Requests()) - before - 1; n != 0 || ins2 != ins || del2 != del {
		t.Fatalf("after a graceful stop, the restart redelivered %d requests (%d inserts, %d deletes)", n, ins2-ins, del2-del)
	}
	t.Logf("graceful stop: 0 rows redelivered")
	r.stop(t)
	e.assertEqual("users", "users")
	if !strings.Contains(e.logs.String(), "final acknowledgement confirmed") {
		t.Fatal("the final acknowledgement was not confirmed")
	}
}

// An ingress request that got no answer may be applied by Feldera later.
// Without a fence, newer rows sent meanwhile are overwritten by the late
// old ones (the test sees it); with the fence, nothing newer is sent until
// the late request can no longer land.
func TestFaults_LateIngressIsFenced(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	for _, fence := range []time.Duration{time.Millisecond, 5 * time.Second} {
		t.Run(fmt.Sprintf("fence=%s", fence), func(t *testing.T) {
			e, client, cfg := lateIngressEnv(t)
			cfg.IngressFence = fence
			cfg.BatchLinger = 0
			e.startWith(cfg, client)
			e.waitSlot()
			e.fel.InjectFault(felderatest.Fault{Kind: felderatest.HangThenApply, Path: "ingress", Count: 1})
			e.execOwn("INSERT INTO users SELECT g, 'old', 0 FROM generate_series(1, 10) g") // held, then applied late
			e.waitHeld(1)
			e.waitLog("push 10 rows to users", 10*time.Second) // the client gave up
			e.execOwn("UPDATE users SET name = 'new'")
			if fence < time.Second {
				e.waitConfirmed(e.currentLSN(), 30*time.Second) // the newer rows are in before the old request lands
			} else {
				e.waitLog("may still be applied", 10*time.Second) // fenced: nothing newer goes out
			}
			e.fel.ClearFaults() // the old request lands now
			e.waitLateApplied(1)
			e.waitConfirmed(e.currentLSN(), 30*time.Second)
			d := e.diff("users", "users")
			if fence < time.Second {
				if !strings.Contains(d, "missing in feldera") {
					t.Fatalf("without a fence the late request should overwrite newer rows; the oracle saw nothing (%q)", d)
				}
				t.Logf("no fence: stale rows detected")
				return
			}
			if d != "" {
				t.Fatal(d)
			}
		})
	}
}

// lateIngressEnv is a connector environment whose client gives up on an
// ingress request after 1 s.
func lateIngressEnv(t *testing.T) (*env, *feldera.Client, connector.Config) {
	e := newEnv(t, mixedPG, mixedFeldera)
	client, err := feldera.New(feldera.Config{URL: e.fel.URL, Pipeline: "p", RequestTimeout: time.Second, RetryWaitMin: 10 * time.Millisecond, RetryWaitMax: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return e, client, e.config("users,public.items:catalog_items")
}

// The fence outlives the process. A connector that stops while an ingress
// request may still land leaves the deadline in the fence file, and the
// next process waits for it; without the file (the behaviour before it
// existed) the next process sends newer rows at once and the late request
// overwrites them, which the test sees. A process that died without
// returning left the file marked running: the next one fences in full.
func TestFaults_LateIngressFenceSurvivesRestart(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprintf("fence_file_kept=%v", keep), func(t *testing.T) {
			e, client, cfg := lateIngressEnv(t)
			cfg.IngressFence = 5 * time.Second
			cfg.BatchLinger = 0
			r := e.startWith(cfg, client)
			e.waitSlot()
			e.fel.InjectFault(felderatest.Fault{Kind: felderatest.HangThenApply, Path: "ingress", Count: 1})
			sent := time.Now()
			e.execOwn("INSERT INTO users SELECT g, 'old', 0 FROM generate_series(1, 10) g") // held, then applied late
			e.waitHeld(1)
			e.waitLog("push 10 rows to users", 10*time.Second) // the client gave up
			r.stop(t)
			f, err := state.LoadFence(state.FencePath(cfg.StateFile))
			if err != nil || f.Running || time.Until(f.Until) < time.Second {
				t.Fatalf("after a stop with an unanswered request: fence file %+v, %v", f, err)
			}
			if !keep {
				os.Remove(state.FencePath(cfg.StateFile))
			}
			e.execOwn("UPDATE users SET name = 'new'")
			before := len(e.fel.Requests())
			e.startWith(cfg, client) // a new process: nothing in memory
			if !keep {
				// Nothing holds the new process back: once it has sent
				// everything, the old request lands on top.
				e.waitConfirmed(e.currentLSN(), 30*time.Second)
				e.fel.ClearFaults()
				e.waitLateApplied(1)
				if d := e.diff("users", "users"); !strings.Contains(d, "missing in feldera") {
					t.Fatalf("without the fence file the late request should overwrite newer rows; the oracle saw nothing (%q)", d)
				}
				t.Logf("fence file removed: stale rows detected")
				return
			}
			time.Sleep(time.Until(sent.Add(3 * time.Second)))
			sentEarly := len(e.fel.Requests()) - before
			e.fel.ClearFaults() // the old request lands now, 3 s after it was sent, inside the fence
			e.waitLateApplied(1)
			e.waitConfirmed(e.currentLSN(), 30*time.Second)
			if d := e.diff("users", "users"); sentEarly != 0 || d != "" {
				t.Fatalf("with the fence file: %d requests before the fence, diff %q", sentEarly, d)
			}
		})
	}
}

// A process that died leaves its fence file marked running. The next one
// waits only when an ingress request was outstanding, and then until that
// request's last byte plus the fence (from its own start when the last
// byte was never recorded); with nothing outstanding it sends at once.
func TestFence_AfterUncleanExit(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	const fence = 3 * time.Second
	wrote := time.Now().Add(-time.Second)
	for _, c := range []struct {
		name        string
		outstanding *state.Outstanding
		log         string
	}{
		{"nothing_outstanding", nil, "it had no ingress request outstanding"},
		{"outstanding_written", &state.Outstanding{Table: "users", Rows: 5, Since: wrote.Add(-time.Second), Wrote: wrote}, "had an ingress request outstanding"},
		{"outstanding_unwritten", &state.Outstanding{Table: "users", Rows: 5, Since: wrote}, "had an ingress request outstanding"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, mixedPG, mixedFeldera)
			cfg := e.config("users")
			cfg.IngressFence = fence
			cfg.BatchLinger = 0
			if err := state.SaveFence(state.FencePath(cfg.StateFile), &state.Fence{Running: true, PID: 12345, Outstanding: c.outstanding}); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			r := e.start(cfg)
			e.waitSlot()
			e.execOwn("INSERT INTO users SELECT g, 'x', 0 FROM generate_series(1, 5) g")
			e.waitConfirmed(e.currentLSN(), 30*time.Second)
			reqs := e.fel.Requests()
			if len(reqs) == 0 {
				t.Fatal("no ingress request")
			}
			first := reqs[0].Time
			switch {
			case c.outstanding == nil && !first.Before(start.Add(fence)):
				t.Fatalf("nothing was outstanding, yet the first ingress came %s after start (the fence is %s)", first.Sub(start), fence)
			case c.outstanding != nil && !c.outstanding.Wrote.IsZero() && first.Before(wrote.Add(fence)):
				t.Fatalf("first ingress %s after the dead process's last byte, want ≥ %s", first.Sub(wrote), fence)
			case c.outstanding != nil && c.outstanding.Wrote.IsZero() && first.Before(start.Add(fence)):
				t.Fatalf("last byte unknown: first ingress %s after start, want ≥ %s", first.Sub(start), fence)
			}
			if !strings.Contains(e.logs.String(), c.log) || !strings.Contains(e.logs.String(), "12345") {
				t.Fatalf("the start was not explained in the log (want %q)\n%s", c.log, tail(e.logs.String(), 2000))
			}
			f, _ := state.LoadFence(state.FencePath(cfg.StateFile))
			if f == nil || !f.Running || f.PID != os.Getpid() || f.Outstanding != nil {
				t.Fatalf("while running and idle, the fence file should name this process with nothing outstanding: %+v", f)
			}
			r.stop(t)
			if f, _ := state.LoadFence(state.FencePath(cfg.StateFile)); f == nil || f.Running {
				t.Fatalf("after a stop the fence file should not be marked running: %+v", f)
			}
		})
	}
}

// An answer that proves Feldera refused an ingress request before reading
// it (503 RestoreInProgress right after a Feldera restart) sets off no
// fence: the retry goes out at once and nothing is left marked. A 503 that
// may follow partial ingestion (the manager's timeout) fences.
func TestFence_OnlyAnswersThatMayLandLate(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	for _, c := range []struct {
		code  string
		fence bool
	}{{"RestoreInProgress", false}, {"BootstrapInProgress", false}, {"PipelineInteractionUnreachable", true}} {
		t.Run(c.code, func(t *testing.T) {
			e := newEnv(t, mixedPG, mixedFeldera)
			cfg := e.config("users")
			cfg.IngressFence = 4 * time.Second
			cfg.BatchLinger = 0
			conn := e.newConnector(cfg, e.client)
			e.run(conn)
			e.waitSlot()
			e.fel.InjectFault(felderatest.Fault{Kind: felderatest.FailStatus, Path: "ingress", Status: 503, Code: c.code, Count: 1})
			e.execOwn("INSERT INTO users SELECT g, 'x', 0 FROM generate_series(1, 5) g")
			e.waitLog(c.code, 10*time.Second)
			fenced := conn.IngressFenced() > 0
			if f, err := state.LoadFence(state.FencePath(cfg.StateFile)); err != nil || (f.Outstanding != nil) != c.fence {
				t.Fatalf("fence file after the answer: %+v, %v", f, err)
			}
			e.waitConfirmed(e.currentLSN(), 30*time.Second)
			e.assertEqual("users", "users")
			waited := strings.Contains(e.logs.String(), "may still be applied")
			if fenced != c.fence || waited != c.fence {
				t.Fatalf("503 %s: fenced %v, waited %v; want %v\n%s", c.code, fenced, waited, c.fence, tail(e.logs.String(), 2000))
			}
		})
	}
}

// /readyz while the supervisor backs off between sessions: not ready,
// saying why, and ready again once a session streams.
func TestReady_FalseDuringBackoff(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	e := newEnv(t, mixedPG, mixedFeldera)
	cfg := e.config("users,public.items:catalog_items")
	cfg.BackoffInitial, cfg.BackoffMax = 5*time.Second, 5*time.Second
	c := e.newConnector(cfg, e.client)
	e.run(c)
	e.waitSlot()
	e.poll("ready", 30*time.Second, func() bool { ok, _ := c.Ready(); return ok })
	e.terminateWalSender()
	e.waitLog("session: ended, reconnecting", 30*time.Second)
	if ready, why := c.Ready(); ready || why != "no replication session" {
		t.Fatalf("during the backoff: ready=%v (%s), want not ready: no replication session", ready, why)
	}
	e.poll("ready after the backoff", 60*time.Second, func() bool { ok, _ := c.Ready(); return ok })
}

// terminateWalSender ends the walsender holding the test's slot, and only
// that one: other tests share the cluster.
func (e *env) terminateWalSender() {
	e.t.Helper()
	var ok bool
	if err := e.db.QueryRow(context.Background(), "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL", e.slot).Scan(&ok); err != nil || !ok {
		e.t.Fatalf("terminating the walsender of slot %s: %v (terminated: %v)", e.slot, err, ok)
	}
}
