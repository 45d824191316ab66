package snapshot_test

import (
	"testing"

	"github.com/pgfeldera/pgfeldera/snapshot"
	"github.com/pgfeldera/pgfeldera/state"
)

func TestDecide(t *testing.T) {
	tables := []snapshot.Mapping{{"public.users", "users"}, {"public.items", "catalog_items"}}
	st := func(status ...string) *state.State {
		s := &state.State{Version: 1, Slot: "s", Publication: "p"}
		for i, m := range tables {
			s.Tables = append(s.Tables, state.Table{Source: m.Source, Dest: m.Dest, Status: status[i]})
		}
		return s
	}
	complete := st(state.Complete, state.Complete)
	other := st(state.Complete, state.Complete)
	other.Tables[1].Dest = "items"
	present := snapshot.Slot{Exists: true, WalStatus: "reserved"}
	cases := []struct {
		name   string
		state  *state.State
		slot   snapshot.Slot
		want   snapshot.Action
		target snapshot.Target
	}{
		{"noStateNoSlot", nil, snapshot.Slot{}, snapshot.Snapshot, snapshot.Target{}},
		{"completeAndSlot", complete, present, snapshot.Stream, snapshot.Target{}},
		{"completeAndExtendedSlot", complete, snapshot.Slot{Exists: true, WalStatus: "extended"}, snapshot.Stream, snapshot.Target{}},
		{"pendingAndSlot", st(state.Complete, state.Pending), present, snapshot.Resnapshot, snapshot.Target{}},
		{"pendingNoSlot", st(state.Pending, state.Pending), snapshot.Slot{}, snapshot.Resnapshot, snapshot.Target{}},
		{"incrementalAndSlot", st(state.Complete, state.Incremental), present, snapshot.Stream, snapshot.Target{}},
		{"incrementalSlotMissing", st(state.Incremental, state.Incremental), snapshot.Slot{}, snapshot.Resnapshot, snapshot.Target{}},
		{"incrementalSlotLost", st(state.Incremental, state.Complete), snapshot.Slot{Exists: true, WalStatus: "lost"}, snapshot.Resnapshot, snapshot.Target{}},
		{"incrementalFelderaRestarted", withIncarnation(withDeployment(st(state.Incremental, state.Complete), "d1"), "i1"), present, snapshot.Resnapshot, snapshot.Target{DeploymentID: "d1", Incarnation: "i2"}},
		{"incrementalAndPending", st(state.Incremental, state.Pending), present, snapshot.Resnapshot, snapshot.Target{}},
		{"noStateButSlot", nil, present, snapshot.Resnapshot, snapshot.Target{}},
		{"completeSlotMissing", complete, snapshot.Slot{}, snapshot.Resnapshot, snapshot.Target{}},
		{"completeSlotLost", complete, snapshot.Slot{Exists: true, WalStatus: "lost"}, snapshot.Resnapshot, snapshot.Target{}},
		{"mappingChanged", other, present, snapshot.Resnapshot, snapshot.Target{}},
		{"felderaRedeployed", withDeployment(complete, "d1"), present, snapshot.Resnapshot, snapshot.Target{DeploymentID: "d2"}},
		{"felderaRedeployedFaultTolerant", withDeployment(complete, "d1"), present, snapshot.Stream, snapshot.Target{DeploymentID: "d2", FaultTolerant: true}},
		{"felderaSameDeployment", withDeployment(complete, "d1"), present, snapshot.Stream, snapshot.Target{DeploymentID: "d1"}},
		{"felderaRestartedInPlace", withIncarnation(withDeployment(complete, "d1"), "i1"), present, snapshot.Resnapshot, snapshot.Target{DeploymentID: "d1", Incarnation: "i2"}},
		{"felderaRestartedInPlaceFaultTolerant", withIncarnation(withDeployment(complete, "d1"), "i1"), present, snapshot.Stream, snapshot.Target{DeploymentID: "d1", Incarnation: "i2", FaultTolerant: true}},
		{"felderaSameIncarnation", withIncarnation(withDeployment(complete, "d1"), "i1"), present, snapshot.Stream, snapshot.Target{DeploymentID: "d1", Incarnation: "i1"}},
		{"felderaRedeployedFaultTolerantNoCheckpoint", withDeployment(complete, "d1"), present, snapshot.Resnapshot, snapshot.Target{DeploymentID: "d2", FaultTolerant: true, NoCheckpoint: true}},
		{"felderaSameDeploymentNoCheckpoint", withDeployment(complete, "d1"), present, snapshot.Stream, snapshot.Target{DeploymentID: "d1", FaultTolerant: true, NoCheckpoint: true}},
		// A program change streams on: the tables it modified are read
		// again by themselves (setup/restore.go, Reconcile).
		{"programChanged", withProgram(complete, 1), present, snapshot.Stream, snapshot.Target{FaultTolerant: true}},
		{"restoredLess", complete, present, snapshot.Resnapshot, snapshot.Target{FaultTolerant: true, Lost: "Feldera lists no checkpoint"}},
		{"restoredLessSlotMissing", complete, snapshot.Slot{}, snapshot.Resnapshot, snapshot.Target{FaultTolerant: true, Lost: "Feldera lists no checkpoint"}},
		{"stateWithoutIncarnation", withDeployment(complete, "d1"), present, snapshot.Stream, snapshot.Target{DeploymentID: "d1", Incarnation: "i2"}},
		{"serverDiverged", complete, snapshot.Slot{Exists: true, Diverged: "a failover forked before what Feldera holds"}, snapshot.Resnapshot, snapshot.Target{}},
		{"incrementalServerDiverged", st(state.Incremental, state.Complete), snapshot.Slot{Exists: true, Diverged: "another cluster"}, snapshot.Resnapshot, snapshot.Target{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := snapshot.Decide(c.state, c.slot, "s", "p", tables, c.target)
			if p.Action != c.want || p.Reason == "" {
				t.Fatalf("Decide = %v (%q), want %v", p.Action, p.Reason, c.want)
			}
		})
	}
	if p := snapshot.Decide(complete, present, "other_slot", "p", tables, snapshot.Target{}); p.Action != snapshot.Resnapshot {
		t.Fatalf("slot renamed: %v", p.Action)
	}
}

func withProgram(s *state.State, v int64) *state.State {
	c := *s
	c.ProgramVersion = v
	return &c
}

func withIncarnation(s *state.State, id string) *state.State {
	c := *s
	c.Incarnation = id
	return &c
}

func withDeployment(s *state.State, id string) *state.State {
	c := *s
	c.DeploymentID = id
	return &c
}
