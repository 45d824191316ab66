package delivery

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/state"
)

// statsAPI answers /stats with the ingress totals and incarnation set.
type statsAPI struct {
	incarnation string
	totals      map[string]uint64
}

func (a *statsAPI) StartTransaction(context.Context) (int64, error) { return 1, nil }
func (a *statsAPI) CommitTransaction(context.Context) error         { return nil }
func (a *statsAPI) Stats(context.Context) (*feldera.Stats, error) {
	st := &feldera.Stats{}
	st.GlobalMetrics.IncarnationUUID = a.incarnation
	for t, n := range a.totals {
		in := feldera.InputStats{EndpointName: t + ".api-ingress-0000000000000001"}
		in.Metrics.TotalRecords = n
		st.Inputs = append(st.Inputs, in)
	}
	return st, nil
}

// The window's rules: what a session skips of the replay, given what the
// fence file counted past the progress row and what /stats shows now.
func TestWindow(t *testing.T) {
	const row = pglogrepl.LSN(0x100)
	left := &state.PastRow{Row: uint64(row), Taken: map[string]uint64{"a": 10, "b": 3}, Counted: "i1"}
	for _, c := range []struct {
		name      string
		left      *state.PastRow
		read      pglogrepl.LSN // the progress row the session read
		api       statsAPI
		steps     func(x *Transactions) error // after the first POST of a
		wantSkipA int                         // of 100 lines of a
		wantSkipB int
		wantTaken map[string]uint64 // the window's counts at the end
	}{
		{"nothing counted before: a's count from its first POST", nil, row, statsAPI{"i1", map[string]uint64{"a": 7}}, nil, 0, 0, map[string]uint64{"a": 7}},
		{"the same row: what the endpoints took since", left, row, statsAPI{"i1", map[string]uint64{"a": 15, "b": 3}}, nil, 5, 0, map[string]uint64{"a": 10, "b": 3}},
		{"another row: nothing", left, 0x200, statsAPI{"i1", map[string]uint64{"a": 15, "b": 3}}, nil, 0, 0, map[string]uint64{"a": 15}},
		{"Feldera restarted: nothing", left, row, statsAPI{"i2", map[string]uint64{"a": 15, "b": 3}}, nil, 0, 0, map[string]uint64{"a": 15}},
		{"a row commit carries what is left to skip", left, row, statsAPI{"i1", map[string]uint64{"a": 15, "b": 3}}, func(x *Transactions) error {
			x.Skip("a", 3) // 2 of a's 5 left
			return x.RowCommitted(0x300)
		}, 2, 0, map[string]uint64{"a": 13}},
		{"a retraction drops the table", left, row, statsAPI{"i1", map[string]uint64{"a": 15, "b": 3}}, func(x *Transactions) error {
			return x.Retracted("a")
		}, 0, 0, map[string]uint64{"b": 3}},
		{"a chunk drops the table", left, row, statsAPI{"i1", map[string]uint64{"a": 15, "b": 3}}, func(x *Transactions) error {
			return x.Uncount("a")
		}, 0, 0, map[string]uint64{"b": 3}},
	} {
		t.Run(c.name, func(t *testing.T) {
			logger := slog.New(slog.NewTextHandler(io.Discard, nil))
			api := c.api
			x := &Transactions{API: &api, Fence: NewFence(time.Second, logger), Logger: logger, Counted: map[string]bool{"a": true, "b": true}}
			x.LeftPast(c.left)
			if err := x.Resume(c.read, true); err != nil {
				t.Fatal(err)
			}
			if err := x.Posting(context.Background(), "a"); err != nil {
				t.Fatal(err)
			}
			if c.steps != nil {
				if err := c.steps(x); err != nil {
					t.Fatal(err)
				}
				if err := x.Posting(context.Background(), "a"); err != nil { // a retracted or chunked a is not counted again
					t.Fatal(err)
				}
			}
			if a, b := x.Skip("a", 100), x.Skip("b", 100); a != c.wantSkipA || b != c.wantSkipB {
				t.Fatalf("skips %d of a and %d of b, want %d and %d", a, b, c.wantSkipA, c.wantSkipB)
			}
			if got := x.win.taken; len(got) != len(c.wantTaken) || func() bool {
				for k, v := range c.wantTaken {
					if got[k] != v {
						return true
					}
				}
				return false
			}() {
				t.Fatalf("window counts %v, want %v", got, c.wantTaken)
			}
		})
	}
}

// A replay that does not start at the row (the slot past it) meets other
// records first: what Feldera holds past the row is not skipped.
func TestWindow_SlotPastTheRow(t *testing.T) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	api := statsAPI{"i1", map[string]uint64{"a": 15}}
	x := &Transactions{API: &api, Fence: NewFence(time.Second, logger), Logger: logger, Counted: map[string]bool{"a": true}}
	x.LeftPast(&state.PastRow{Row: 0x100, Taken: map[string]uint64{"a": 10}, Counted: "i1"})
	if err := x.Resume(0x100, false); err != nil {
		t.Fatal(err)
	}
	if err := x.Posting(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	if n := x.Skip("a", 100); n != 0 || x.Skipping("a") {
		t.Fatalf("skips %d records of a, want none", n)
	}
}
