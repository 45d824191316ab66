package pgcluster

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Stop removes a cluster's directory. A test process that dies without
// stopping it (a panic, the test timeout's SIGQUIT, SIGKILL) takes its
// postmaster along (Pdeathsig) but leaves the directory, tens of MB in
// the temp directory each time. So each directory names its owner (pid
// and start time, so a reused pid does not count), and Start removes the
// directories whose owner is gone.

const ownerFile = "owner"

// legacyAge: a directory with no owner file is one being created right
// now, or one left by a harness that did not write it; only the latter
// is this old.
const legacyAge = time.Hour

// markOwner records this process as dir's owner.
func markOwner(dir string) error {
	start, ok := processStart(os.Getpid())
	if !ok {
		return fmt.Errorf("pgcluster: cannot read this process's start time")
	}
	return os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())+" "+start+"\n"), 0o644)
}

// processStart is a process's start time in clock ticks since boot
// (/proc/PID/stat, field 22); false when it does not exist.
func processStart(pid int) (string, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", false
	}
	// The command name (field 2) may hold spaces: count from its ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return "", false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return "", false
	}
	return f[19], true // field 22 overall; f[0] is field 3
}

// Sweep removes the cluster directories in the temp directory whose
// owner process is gone, and those without an owner older than
// legacyAge. It returns what it removed.
func Sweep() []string {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "pgcluster-*"))
	var removed []string
	for _, dir := range dirs {
		if orphaned(dir) && os.RemoveAll(dir) == nil {
			removed = append(removed, dir)
		}
	}
	return removed
}

func orphaned(dir string) bool {
	if postmasterAlive(dir) {
		return false
	}
	b, err := os.ReadFile(filepath.Join(dir, ownerFile))
	if err != nil {
		st, serr := os.Stat(dir)
		return os.IsNotExist(err) && serr == nil && time.Since(st.ModTime()) > legacyAge
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return false
	}
	pid, err := strconv.Atoi(f[0])
	if err != nil {
		return false
	}
	start, alive := processStart(pid)
	return !alive || start != f[1]
}

// postmasterAlive reports whether the postmaster named in dir's
// postmaster.pid still runs: a directory in use is never removed, owner
// or not.
func postmasterAlive(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid"))
	if err != nil {
		return false
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		return false
	}
	_, alive := processStart(pid)
	return alive
}
