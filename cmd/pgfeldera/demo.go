package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
)

// demoProgram is the program `pgfeldera demo` runs. It starts a throwaway
// PostgreSQL and the Feldera double, which are test harnesses: they live
// in a program of their own so that this binary, the one users deploy,
// links none of them.
const demoProgram = "pgfeldera-demo"

// runDemo runs pgfeldera-demo with the same arguments, environment and
// output, and exits with its code. It looks beside this binary first
// (`make demo` builds both into bin/), then on PATH.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	self, _ := os.Executable()
	prog, err := findDemo(self, exec.LookPath)
	if err != nil {
		fmt.Fprintln(stderr, "pgfeldera demo:", err)
		return exitFatal
	}
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Stdout, cmd.Stderr, cmd.Stdin = stdout, stderr, os.Stdin
	// Ctrl-C reaches the demo too (one process group); it stops on its
	// own and prints its comparison, so this waits for it.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return exitOK
	case cmd.ProcessState != nil && cmd.ProcessState.Success():
		// Stopped by Ctrl-C, and it stopped cleanly: exec reports the
		// context's error for a process it interrupted; that is no failure.
		return exitOK
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		return exit.ExitCode()
	default:
		fmt.Fprintf(stderr, "pgfeldera demo: %s: %v\n", prog, err)
		return exitFatal
	}
}

// findDemo is the pgfeldera-demo beside the binary at self, else the one
// lookPath finds.
func findDemo(self string, lookPath func(string) (string, error)) (string, error) {
	if self != "" {
		beside := filepath.Join(filepath.Dir(self), demoProgram)
		if fi, err := os.Stat(beside); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return beside, nil
		}
	}
	if p, err := lookPath(demoProgram); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%s is not installed beside %s or on PATH: the demo is a program of its own, so that pgfeldera links no test harness; from a source checkout, `make demo` builds both and runs it", demoProgram, self)
}
