package pgcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// ErrNoBinaries is returned when no PostgreSQL server binaries are found.
var ErrNoBinaries = errors.New("no PostgreSQL server binaries found: set PG_BIN to a directory with initdb and postgres, or install them (Debian: apt-get install -y postgresql)")

// FindBinDir returns the directory holding initdb and postgres: PG_BIN,
// else the newest /usr/lib/postgresql/<major>/bin.
func FindBinDir() (string, error) {
	if d := os.Getenv("PG_BIN"); d != "" {
		if _, err := os.Stat(filepath.Join(d, "postgres")); err != nil {
			return "", fmt.Errorf("PG_BIN=%s: %w", d, err)
		}
		return d, nil
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	if len(matches) == 0 {
		return "", ErrNoBinaries
	}
	sort.Slice(matches, func(i, j int) bool {
		return majorOf(matches[i]) > majorOf(matches[j])
	})
	return filepath.Dir(matches[0]), nil
}

// Tool finds a PostgreSQL client program (pgbench, psql): in PG_BIN, then
// the newest /usr/lib/postgresql/<major>/bin, then PATH. Any version works
// against any server here. Missing, it fails the test in CI and skips it
// elsewhere.
func Tool(tb testing.TB, name string) string {
	tb.Helper()
	var dirs []string
	if d := os.Getenv("PG_BIN"); d != "" {
		dirs = append(dirs, d)
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/" + name)
	sort.Slice(matches, func(i, j int) bool { return majorOf(matches[i]) > majorOf(matches[j]) })
	for _, m := range matches {
		dirs = append(dirs, filepath.Dir(m))
	}
	for _, d := range dirs {
		if p := filepath.Join(d, name); isExecutable(p) {
			return p
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	err := fmt.Errorf("%s not found in PG_BIN, /usr/lib/postgresql/*/bin or PATH (Debian: apt-get install -y postgresql-client)", name)
	if InCI() {
		tb.Fatal(err)
	}
	tb.Skip(err)
	return ""
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

func majorOf(path string) int {
	for _, part := range strings.Split(path, "/") {
		if n, err := strconv.Atoi(part); err == nil {
			return n
		}
	}
	return 0
}

// InCI reports whether the tests run in CI, where missing binaries fail:
// CI set to anything but a false value ("", "0", "false", "no", "off").
func InCI() bool {
	switch strings.ToLower(strings.TrimSpace(os.Getenv("CI"))) {
	case "", "0", "false", "no", "off":
		return false
	}
	return true
}

// osUser returns the credentials of the unprivileged user to run postgres as.
func osUser() (*syscall.Credential, error) {
	names := []string{"postgres", "pgfeldera"}
	if n := os.Getenv("PGCLUSTER_OS_USER"); n != "" {
		names = []string{n}
	}
	for _, name := range names {
		if u, err := user.Lookup(name); err == nil {
			return credOf(u)
		}
	}
	name := names[len(names)-1]
	if out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("create OS user %q for postgres (it refuses to run as root): %w: %s", name, err, out)
	}
	u, err := user.Lookup(name)
	if err != nil {
		return nil, err
	}
	return credOf(u)
}

func credOf(u *user.User) (*syscall.Credential, error) {
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return nil, err
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}
