package crashtest_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
)

// The claims README makes about the process, checked on the real binary.

// NO_PROGRESS_TIMEOUT: a Feldera that never completes ends the process
// with exit 1 (a supervisor restarts it), naming the setting.
func TestBinary_NoProgressTimeoutExits1(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	w := newWorld(t, nil)
	p := w.start("NO_PROGRESS_TIMEOUT=3s", "FELDERA_COMPLETION_TIMEOUT=1s", "SNAPSHOT_MODE=never")
	seeded(w, p, false)
	w.fel.HoldCompletion(true)
	w.exec("INSERT INTO users VALUES (1, 'never completes', 1)")
	code := p.exited(60 * time.Second)
	if code != 1 {
		p.kill()
		t.Fatalf("exit %d, want 1 after NO_PROGRESS_TIMEOUT\n%s", code, w.log())
	}
	if !strings.Contains(w.log(), "NO_PROGRESS_TIMEOUT") {
		t.Fatalf("the exit does not name NO_PROGRESS_TIMEOUT:\n%s", w.log())
	}
	// The row was never acknowledged: a healthy restart delivers it.
	w.fel.HoldCompletion(false)
	p2 := w.start("SNAPSHOT_MODE=never")
	if msg := w.caughtUp(p2, 60*time.Second); msg != "" {
		t.Fatal(msg)
	}
	p2.stop(t)
}

// A graceful stop waits for the in-flight batch (up to STOP_TIMEOUT); a
// second signal ends the process at once, by the signal.
func TestBinary_SecondSignalExitsAtOnce(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	w := newWorld(t, nil)
	p := w.start("STOP_TIMEOUT=120s", "FELDERA_COMPLETION_TIMEOUT=120s", "SNAPSHOT_MODE=never")
	seeded(w, p, false)
	w.fel.HoldCompletion(true)
	before := len(w.fel.Requests())
	w.exec("INSERT INTO users VALUES (1, 'held', 1)")
	w.poll("the batch to be sent", 30*time.Second, func() bool { return len(w.fel.Requests()) > before })
	p.cmd.Process.Signal(syscall.SIGTERM)
	w.poll("the graceful stop to begin", 30*time.Second, func() bool { return strings.Contains(w.log(), "stopping gracefully") })
	// Still running a moment later: a process that did not wait would
	// have exited by then (a slow machine can only make this pass more
	// easily, never fail it).
	select {
	case <-p.done:
		t.Fatalf("exited %d while its batch was held: the graceful stop did not wait", p.code)
	case <-time.After(500 * time.Millisecond):
	}
	sent := time.Now()
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.exited(30 * time.Second); code == -1 && !exitedNow(p) {
		p.kill()
		t.Fatal("a second SIGTERM did not end the process")
	}
	ws, _ := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Fatalf("the second signal should kill the process (default handling); it exited with %v", p.cmd.ProcessState)
	}
	t.Logf("second SIGTERM → exit in %s (STOP_TIMEOUT 120 s)", time.Since(sent).Round(time.Millisecond))
}

// Neither the API key nor the DSN's password appears in anything `run`
// prints, at debug level, through Feldera errors and retries.
func TestBinary_SecretsNeverPrinted(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	const apiKey, password = "apikey-S3CRET-7f3a9", "pgpw-S3CRET-51c0"
	w := newWorld(t, func(c *felderatest.Config) { c.APIKey = apiKey })
	dsn := strings.Replace(w.dsn, "postgres@", "postgres:"+password+"@", 1)
	w.fel.InjectFault(felderatest.Fault{Kind: felderatest.FailStatus, Path: "ingress", Status: 503, Code: "Initializing", Count: 2})
	p := w.start("PG_DSN="+dsn, "FELDERA_API_KEY="+apiKey, "LOG_LEVEL=debug", "SNAPSHOT_MODE=never")
	seeded(w, p, false)
	w.exec("INSERT INTO users SELECT g, 'x', g FROM generate_series(1, 10) g")
	if msg := w.caughtUp(p, 60*time.Second); msg != "" {
		t.Fatal(msg)
	}
	p.stop(t)
	if w.fel.Served(felderatest.FailStatus) < 2 {
		t.Fatalf("the injected errors were not served: %d", w.fel.Served(felderatest.FailStatus))
	}
	// A configuration error that quotes the DSN, and an unreachable server.
	bad := w.start("PG_DSN=postgres://postgres:"+password+"@127.0.0.1:1/none?sslmode=disable", "FELDERA_API_KEY="+apiKey, "LOG_LEVEL=debug", "NO_PROGRESS_TIMEOUT=2s")
	if code := bad.exited(60 * time.Second); code != 1 && code != 2 {
		bad.kill()
		t.Fatalf("an unreachable Postgres exited %d", code)
	}
	out := w.log()
	if !strings.Contains(out, "503") && !strings.Contains(out, "Initializing") {
		t.Fatalf("the log shows no Feldera error: the test saw nothing to leak\n%s", out)
	}
	for name, secret := range map[string]string{"FELDERA_API_KEY": apiKey, "the DSN password": password} {
		if strings.Contains(out, secret) {
			i := strings.Index(out, secret)
			t.Errorf("%s appears in the output: …%s…", name, out[max(0, i-200):min(len(out), i+100)])
		}
	}
}

// One process per state file: a second `run` on the same STATE_FILE (a
// RollingUpdate with surge, a second unit) exits 2 naming the file and the
// running process, and leaves the first one running and delivering.
func TestBinary_SecondRunOnOneStateFileExits2(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	w := newWorld(t, nil)
	p := w.start("SNAPSHOT_MODE=never")
	seeded(w, p, false)
	second := w.start("SNAPSHOT_MODE=never")
	code := second.exited(60 * time.Second)
	if code != 2 {
		second.kill()
		t.Fatalf("a second run on the state file exited %d, want 2\n%s", code, second.output())
	}
	out := second.output()
	for _, want := range []string{filepath.Join(w.dir, "state.json"), fmt.Sprintf("pid %d", p.cmd.Process.Pid), "one pgfeldera process per state file"} {
		if !strings.Contains(out, want) {
			t.Fatalf("the refusal does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "session: streaming") || strings.Contains(out, "removed temporary files") {
		t.Fatalf("the second process touched the slot or the state before refusing:\n%s", out)
	}
	if exitedNow(p) {
		t.Fatalf("the first process stopped:\n%s", p.output())
	}
	w.exec("INSERT INTO users VALUES (1, 'after the refusal', 1)")
	if msg := w.caughtUp(p, 60*time.Second); msg != "" {
		t.Fatal(msg)
	}
	if code := p.stop(t); code != 0 {
		t.Fatalf("the first process exited %d on SIGTERM", code)
	}
	// The lock goes with the process: a new run starts.
	p2 := w.start("SNAPSHOT_MODE=never")
	seeded(w, p2, false)
	if !p2.streaming() {
		t.Fatalf("a run after the first stopped did not start:\n%s", p2.output())
	}
	p2.stop(t)
}
