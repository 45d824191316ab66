package replconn_test

import (
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"

	"github.com/pgfeldera/pgfeldera/replconn"
)

func TestParseFork(t *testing.T) {
	history := "1\t0/3000158\tno recovery target specified\n\n2\t0/5000A28\tno recovery target specified\n"
	for _, c := range []struct {
		old  int32
		want string
	}{{1, "0/3000158"}, {2, "0/5000A28"}} {
		got, err := replconn.ParseFork(history, 3, c.old)
		if err != nil || got.String() != c.want {
			t.Errorf("old %d: %s, %v; want %s", c.old, got, err, c.want)
		}
	}
	if _, err := replconn.ParseFork(history, 3, 3); err == nil || !strings.Contains(err.Error(), "timeline 3") {
		t.Errorf("a timeline the history does not end: %v", err)
	}
	if _, err := replconn.ParseFork("1\tnot-an-lsn\tx\n", 2, 1); err == nil {
		t.Error("a bad line accepted")
	}
	var zero pglogrepl.LSN
	if got, _ := replconn.ParseFork("", 2, 1); got != zero {
		t.Error("an empty history gave a fork")
	}
}

func TestServerMajor(t *testing.T) {
	for v, want := range map[string]int{"17.10 (Debian 17.10-1)": 17, "18beta1": 18, "15.18": 15} {
		if got, err := replconn.ServerMajor(v); err != nil || got != want {
			t.Errorf("%q: %d, %v; want %d", v, got, err, want)
		}
	}
	if _, err := replconn.ServerMajor(""); err == nil {
		t.Error("an empty server_version accepted")
	}
}
