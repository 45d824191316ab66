package metrics_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
	"github.com/pgfeldera/pgfeldera/metrics"
)

// The slot poller keeps one connection between reads (a connection per
// read would fork a backend every interval), and a kept connection that
// Postgres closed (a restart) is replaced within the same read, so no
// tick reports the slot unreadable while the server is up.
func TestReadSlot_KeepsItsConnectionAcrossARestart(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	c := pgcluster.New(t, pgcluster.Options{})
	dsn := c.NewDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(ctx, "SELECT pg_create_logical_replication_slot('keep_slot', 'pgoutput')")
	conn.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New(dsn, "keep_slot", slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer m.CloseSlotConn()
	ok, first := m.ReadSlotKept(ctx)
	if !ok || first == 0 {
		t.Fatalf("first read: ok=%v, kept connection pid %d", ok, first)
	}
	if ok, again := m.ReadSlotKept(ctx); !ok || again != first {
		t.Fatalf("second read: ok=%v on backend %d, want the kept backend %d", ok, again, first)
	}
	if err := c.Restart(false); err != nil {
		t.Fatal(err)
	}
	ok, after := m.ReadSlotKept(ctx)
	if !ok {
		t.Fatal("the first read after a restart found the slot unreadable: the closed connection was not replaced within the read")
	}
	if after == 0 || after == first {
		t.Fatalf("after the restart the read used backend %d (before: %d)", after, first)
	}
}
