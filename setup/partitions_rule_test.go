package setup

import (
	"io"
	"log/slog"
	"slices"
	"testing"

	"github.com/pgfeldera/pgfeldera/state"
)

func TestPartitionsMoved(t *testing.T) {
	known := []string{"public.m_1", "public.m_2"}
	for _, tc := range []struct {
		name               string
		now                []string
		attached, detached []string
	}{
		{"same", []string{"public.m_1", "public.m_2"}, nil, nil},
		{"attached", []string{"public.m_1", "public.m_2", "public.m_3"}, []string{"public.m_3"}, nil},
		{"detached", []string{"public.m_2"}, nil, []string{"public.m_1"}},
		{"replaced", []string{"public.m_1", "public.m_9"}, []string{"public.m_9"}, []string{"public.m_2"}},
		{"all gone", []string{}, nil, known},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, d := PartitionsMoved(known, tc.now)
			if !slices.Equal(a, tc.attached) || !slices.Equal(d, tc.detached) {
				t.Fatalf("moved = %v, %v; want %v, %v", a, d, tc.attached, tc.detached)
			}
		})
	}
}

func TestReconcilePartitions(t *testing.T) {
	c := Rules{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	complete := state.Table{Source: "public.m", Dest: "m", Status: state.Complete, Rows: 40, Fingerprint: "f", Partitions: []string{"public.m_1"}}
	for _, tc := range []struct {
		name    string
		t       state.Table
		now     []string
		keyed   bool
		changed bool
		why     bool
		reread  bool
	}{
		{"not partitioned", state.Table{Source: "public.t", Status: state.Complete}, nil, true, false, false, false},
		{"unchanged", complete, []string{"public.m_1"}, true, false, false, false},
		{"first record", state.Table{Source: "public.m", Status: state.Complete}, []string{"public.m_1"}, true, true, false, false},
		{"no partition yet, recorded", state.Table{Source: "public.m", Status: state.Complete}, []string{}, true, true, false, false},
		{"attached, keyed", complete, []string{"public.m_1", "public.m_2"}, true, true, false, true},
		{"detached, keyed", complete, []string{}, true, true, false, true},
		{"attached, keyless", complete, []string{"public.m_1", "public.m_2"}, false, false, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab := tc.t
			changed, why := c.reconcilePartitions(&tab, tc.now, tc.keyed)
			if changed != tc.changed || (why != "") != tc.why {
				t.Fatalf("changed %v, why %q; want %v, why %v", changed, why, tc.changed, tc.why)
			}
			if reread := tab.Status == state.Incremental && tab.Retract; reread != tc.reread {
				t.Fatalf("read again %v, want %v: %+v", reread, tc.reread, tab)
			}
			if tc.changed && !slices.Equal(tab.Partitions, tc.now) {
				t.Fatalf("recorded %v, want %v", tab.Partitions, tc.now)
			}
			if tc.reread && tab.Fingerprint != "f" {
				t.Fatalf("the fingerprint was dropped: %+v", tab)
			}
		})
	}
}
