package state

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A state file is held by one lock at a time; the refusal names the file
// and the holder; Unlock (or the holder's death: the kernel closes its
// files) lets the next one in, and the lock file stays where it is.
func TestLock_OneHolder(t *testing.T) {
	sf := filepath.Join(t.TempDir(), "state.json")
	first, err := Lock(sf)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Lock(sf)
	var locked *LockedError
	if !errors.As(err, &locked) {
		t.Fatalf("a second lock while the first is held: %v, want *LockedError", err)
	}
	for _, want := range []string{sf, fmt.Sprintf("pid %d", os.Getpid()), "STATE_FILE"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("the refusal %q does not say %q", err, want)
		}
	}
	if err := first.Unlock(); err != nil {
		t.Fatal(err)
	}
	again, err := Lock(sf)
	if err != nil {
		t.Fatalf("after Unlock: %v", err)
	}
	defer again.Unlock()
	if _, err := os.Stat(LockPath(sf)); err != nil {
		t.Fatal(err)
	}
}
