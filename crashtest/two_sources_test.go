package crashtest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/feldera/felderatest"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest/oracle"
	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
	"github.com/pgfeldera/pgfeldera/setup"
)

// Two sidecars read two Postgres servers into one pipeline, both with
// the default slot name and the progress table: A into users, B into
// users_b. A is killed; B writes on, so the progress row B keeps lies
// inside the WAL A's server writes meanwhile. A's restart must skip
// only what Feldera holds of A's own source: keyed by the slot name
// alone, A read B's row as its own and skipped its own transactions
// below it, which Feldera never got.
func TestProgress_TwoSourcesOnePipeline(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	fel := func(fc *felderatest.Config) {
		crashDouble(fc)
		fc.Tables = felderatest.MustParseDDL(felderaDDL + "CREATE TABLE users_b (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR, score INT);\n" + setup.ProgressDDL)
	}
	a := newWorldOn(t, pgcluster.New(t, pgcluster.Options{}), fel)
	b := newWorldOn(t, pgcluster.New(t, pgcluster.Options{}), fel)
	b.fel = a.fel // one pipeline
	a.slot, b.slot = "pgfeldera", "pgfeldera"
	a.tables, b.tables = "users", "public.users:users_b"
	env := []string{"FELDERA_PROGRESS_TABLE=on"}

	// B's server runs ahead of A's, so that B's position falls inside
	// what A's server writes while A is down.
	b.exec("INSERT INTO users SELECT g, repeat('b', 200), g FROM generate_series(1, 20000) g")
	pa, pb := a.start(env...), b.start(env...)
	a.poll("A to stream", 60*time.Second, pa.streaming)
	b.poll("B to stream", 60*time.Second, pb.streaming)
	a.exec("INSERT INTO users VALUES (1, 'a', 1)")
	a.poll("A to acknowledge its first row", 60*time.Second, func() bool { return a.confirmed() >= a.lsn("SELECT pg_current_wal_insert_lsn()::text") })
	pa.kill()

	bAt := b.lsn("SELECT pg_current_wal_insert_lsn()::text")
	b.exec("INSERT INTO users VALUES (900001, 'b after', 1)")
	b.poll("B to acknowledge its write", 60*time.Second, func() bool { return b.confirmed() > bAt })
	for i := 2; a.lsn("SELECT pg_current_wal_insert_lsn()::text") <= b.confirmed()+4096; i++ {
		a.exec(fmt.Sprintf("INSERT INTO users SELECT g, repeat('a', 200), g FROM generate_series(%d, %d) g", i*1000, i*1000+99))
	}

	pa = a.start(env...)
	target := a.lsn("SELECT pg_current_wal_insert_lsn()::text")
	a.poll("A's restart to catch up", 120*time.Second, func() bool { return pa.streaming() && a.confirmed() >= target })
	pa.stop(t)
	pb.stop(t)
	if out := pa.output(); strings.Contains(out, "skipping them") {
		t.Errorf("A's restart skipped source transactions, which only B's row could cover:\n%s", excerpt(out, 3000))
	}
	for _, c := range []struct {
		w    *world
		dest string
	}{{a, "users"}, {b, "users_b"}} {
		r, err := oracle.Compare(context.Background(), c.w.db, "users", a.fel, c.dest)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Equal() {
			t.Errorf("%s: %s", c.dest, r.String())
		}
	}
	if rows := a.fel.Rows(setup.ProgressTable); len(rows) != 2 {
		t.Errorf("progress rows %v, want one per source", rows)
	}
}
