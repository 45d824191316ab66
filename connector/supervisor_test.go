package connector_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/catalog"
	"github.com/pgfeldera/pgfeldera/connector"
)

func fakeConnector(t *testing.T, noProgress time.Duration) *connector.Connector {
	t.Helper()
	tables, _ := catalog.ParseTables("t")
	c, err := connector.New(connector.Config{
		DSN: "postgres://x@127.0.0.1:1/x", Publication: "p", Slot: "s", Tables: tables,
		BackoffInitial: time.Millisecond, BackoffMax: 16 * time.Millisecond, NoProgressTimeout: noProgress,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A session that reconnects, replays and fails at the same place again is
// not progress: the backoff keeps growing. One that acks resets it.
func TestSupervisor_OnlyProgressResetsBackoff(t *testing.T) {
	c := fakeConnector(t, time.Minute)
	var intervals []time.Duration
	calls := 0
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	connector.SetSessionHook(c, func(ctx context.Context, ack func(uint64)) error {
		calls++
		switch {
		case calls == 7:
			ack(100) // progress
		case calls == 9:
			cancel()
			return nil
		}
		return errors.New("same poison transaction again")
	}, func(d time.Duration) { intervals = append(intervals, d) })
	if err := c.Run(ctx); err != nil {
		t.Fatal(err)
	}
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	want := []time.Duration{ms(1), ms(2), ms(4), ms(8), ms(16), ms(16), ms(1), ms(2)}
	if len(intervals) != len(want) {
		t.Fatalf("intervals = %v, want %v", intervals, want)
	}
	for i := range want {
		if intervals[i] != want[i] {
			t.Fatalf("intervals = %v, want %v", intervals, want)
		}
	}
}

func TestSupervisor_NoProgressDeadline(t *testing.T) {
	c := fakeConnector(t, 200*time.Millisecond)
	connector.SetSessionHook(c, func(ctx context.Context, ack func(uint64)) error {
		return errors.New("feldera unavailable: batch 1 not complete after 60s")
	}, nil)
	start := time.Now()
	err := c.Run(context.Background())
	if !errors.Is(err, connector.ErrNoProgress) || !strings.Contains(err.Error(), "feldera unavailable") {
		t.Fatalf("err = %v", err)
	}
	// Only a lower bound: the deadline cannot fire early; how late it fires
	// on a loaded machine is not this rule's business.
	if el := time.Since(start); el < 200*time.Millisecond {
		t.Fatalf("deadline fired after %s, before NO_PROGRESS_TIMEOUT (200ms)", el)
	}
}

func TestSupervisor_FatalRefusalExitsAtOnce(t *testing.T) {
	c := fakeConnector(t, time.Minute)
	calls := 0
	connector.SetSessionHook(c, func(ctx context.Context, ack func(uint64)) error {
		calls++
		return &connector.FatalError{Err: errors.New("refused: table public.x column y (type OID 16500): enum")}
	}, nil)
	err := c.Run(context.Background())
	if err == nil || calls != 1 || !strings.Contains(err.Error(), "OID 16500") {
		t.Fatalf("calls=%d err=%v", calls, err)
	}
}
