package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
)

// The README's first command: `pgfeldera demo`, built as `make demo`
// builds it, runs pgfeldera-demo beside it end to end, and its final
// side-by-side counts match.
func TestDemo(t *testing.T) {
	pgcluster.AnyVersion(t)
	pgcluster.Shared(t) // skips or fails like the other integration tests without binaries
	bin := buildBoth(t)
	cmd := exec.Command(filepath.Join(bin, "pgfeldera"), "demo", "--duration", "10s")
	cmd.Env = withoutFeldera(os.Environ())
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("demo: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errb.String())
	}
	if strings.Count(out.String(), "✓") != 2 || strings.Contains(out.String(), "✗") {
		t.Fatalf("demo counts differ:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "removed") {
		t.Fatalf("demo did not clean up:\n%s", out.String())
	}
	// Its exit codes pass through: a bad flag is a configuration error.
	bad := exec.Command(filepath.Join(bin, "pgfeldera"), "demo", "--no-such-flag")
	if err := bad.Run(); err == nil || bad.ProcessState.ExitCode() != exitConfig {
		t.Fatalf("pgfeldera demo --no-such-flag: %v, want exit %d", err, exitConfig)
	}
}

// buildBoth builds pgfeldera and pgfeldera-demo into one directory.
func buildBoth(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("go", "build", "-o", dir+string(filepath.Separator), ".", "../pgfeldera-demo").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return dir
}

func withoutFeldera(env []string) []string {
	var kept []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "FELDERA_") {
			kept = append(kept, kv)
		}
	}
	return kept
}

// pgfeldera-demo is found beside the binary first, then on PATH; without
// either, the error names the program and how to build it, and demo exits 1.
func TestFindDemo(t *testing.T) {
	dir := t.TempDir()
	self := filepath.Join(dir, "pgfeldera")
	noPath := func(string) (string, error) { return "", exec.ErrNotFound }
	onPath := func(string) (string, error) { return "/usr/local/bin/pgfeldera-demo", nil }

	_, err := findDemo(self, noPath)
	if err == nil || !strings.Contains(err.Error(), "pgfeldera-demo") || !strings.Contains(err.Error(), "make demo") {
		t.Fatalf("nothing installed: %v", err)
	}
	if got, err := findDemo(self, onPath); err != nil || got != "/usr/local/bin/pgfeldera-demo" {
		t.Fatalf("on PATH: %q %v", got, err)
	}
	beside := filepath.Join(dir, demoProgram)
	if err := os.WriteFile(beside, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, _ := findDemo(self, onPath); got == beside {
		t.Fatal("a file beside the binary that is not executable was chosen")
	}
	if err := os.Chmod(beside, 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := findDemo(self, onPath); err != nil || got != beside {
		t.Fatalf("beside: %q %v, want %q", got, err, beside)
	}

	// The test binary has no pgfeldera-demo beside it; PATH is emptied.
	t.Setenv("PATH", "")
	var out, errb bytes.Buffer
	if code := run(context.Background(), func() {}, []string{"demo"}, env(nil), &out, &errb); code != exitFatal || !strings.Contains(errb.String(), "make demo") {
		t.Fatalf("demo without pgfeldera-demo: exit %d, %q", code, errb.String())
	}
}

// The binary users deploy links no test harness: not the Feldera double,
// not the test clusters, not the testing packages (the demo runs them in
// a program of its own).
func TestBinaryLinksNoTestCode(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list -deps: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		switch {
		case dep == "testing", strings.HasPrefix(dep, "testing/"), dep == "net/http/httptest",
			strings.HasSuffix(dep, "/felderatest"), strings.HasSuffix(dep, "/pgcluster"):
			t.Errorf("cmd/pgfeldera links %s", dep)
		}
	}
}

// Ctrl-C during `pgfeldera demo` stops the demo, which stops cleanly: the
// exit is 0 and nothing on stderr reads like a failure.
func TestDemo_InterruptIsAGracefulStop(t *testing.T) {
	dir := t.TempDir()
	script := "#!/bin/sh\ntrap 'echo stopped; exit 0' INT\necho started\nwhile :; do sleep 0.05; done\n"
	if err := os.WriteFile(filepath.Join(dir, demoProgram), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() { done <- runDemo(ctx, nil, &out, &errb) }()
	for !strings.Contains(out.String(), "started") {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if code := <-done; code != exitOK || errb.String() != "" {
		t.Fatalf("demo interrupted: exit %d, stderr %q; want 0 and nothing", code, errb.String())
	}
	if !strings.Contains(out.String(), "stopped") {
		t.Fatalf("the demo did not see the interrupt: %q", out.String())
	}
}

// syncBuffer is a bytes.Buffer safe for the writer goroutine exec starts
// and the test reading it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
