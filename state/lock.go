package state

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// LockPath is the lock file that goes with a state file.
func LockPath(stateFile string) string { return stateFile + ".lock" }

// ProcessLock is one process's exclusive hold on a state file: two
// processes on one state file would each read the fence once and then
// replace the file under the other, and each would acknowledge WAL by its
// own view of what Feldera holds. A Kubernetes RollingUpdate with surge,
// or a second systemd unit, starts the second while the first runs.
//
// The hold is flock(2) on a lock file beside the state file, never renamed
// or removed: the kernel drops it when the process dies however it dies,
// so a crash never leaves a stale lock behind. The file holds the holder's
// PID and host for the refusal's message only.
type ProcessLock struct {
	f *os.File
}

// LockedError is the refusal: another process holds the state file.
type LockedError struct {
	StateFile string
	Holder    string // "pid 123 on host h since …", or "" when unreadable
}

func (e *LockedError) Error() string {
	who := e.Holder
	if who == "" {
		who = "another process"
	}
	return fmt.Sprintf("state file %s is in use by %s (lock %s): one pgfeldera process per state file. "+
		"Stop the other process, use a Recreate deployment strategy instead of RollingUpdate, or give each connector its own STATE_FILE",
		e.StateFile, who, LockPath(e.StateFile))
}

// Lock takes the state file's lock or returns a *LockedError naming the
// holder. The lock is released by Unlock or by the process's death.
func Lock(stateFile string) (*ProcessLock, error) {
	path := LockPath(stateFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("state lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			b := make([]byte, 256)
			n, _ := f.ReadAt(b, 0)
			return nil, &LockedError{StateFile: stateFile, Holder: strings.TrimSpace(string(b[:n]))}
		}
		return nil, fmt.Errorf("state lock %s: %w", path, err)
	}
	host, _ := os.Hostname()
	who := "pid " + strconv.Itoa(os.Getpid()) + " on host " + host + " since " + time.Now().UTC().Format(time.RFC3339)
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(who+"\n"), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("state lock %s: %w", path, err)
	}
	return &ProcessLock{f: f}, nil
}

// Unlock releases the lock (closing the file drops the flock).
func (l *ProcessLock) Unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
