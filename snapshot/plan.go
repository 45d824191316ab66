package snapshot

import (
	"fmt"

	"github.com/pgfeldera/pgfeldera/state"
)

// Action is what a connector does at startup.
type Action int

const (
	// Stream: the target is seeded and the slot holds everything since.
	Stream Action = iota
	// Snapshot: first run: create the slot with an exported snapshot and
	// copy every table; Feldera holds nothing of ours, nothing to retract.
	Snapshot
	// Resnapshot: drop the slot if any, create a new one with an exported
	// snapshot, copy every table and retract what Feldera holds that the
	// copy did not produce.
	Resnapshot
)

func (a Action) String() string {
	return [...]string{"stream", "snapshot", "resnapshot with retraction"}[a]
}

// Slot is what the startup plan needs to know of the replication slot.
type Slot struct {
	Exists    bool
	WalStatus string // pg_replication_slots.wal_status: reserved, extended, unreserved, lost
	// Diverged says why the server cannot continue what the state
	// records ("" when it can): another cluster, or a timeline that
	// forked before what Feldera holds (a failover).
	Diverged string
}

// Mapping is one configured table: Postgres source → Feldera destination.
type Mapping struct{ Source, Dest string }

// Plan is the startup decision and why it was taken.
type Plan struct {
	Action Action
	Reason string
}

// Target is what the startup plan needs to know of the Feldera pipeline.
type Target struct {
	DeploymentID  string
	Incarnation   string // /stats global_metrics.incarnation_uuid: new on every process restart
	FaultTolerant bool   // completed state survives a Feldera restart
	// NoCheckpoint says a fault-tolerant pipeline has no checkpoint at all:
	// after a redeploy it restored nothing (its storage was cleared).
	NoCheckpoint bool
	// Lost says why a fault-tolerant pipeline may have lost rows that were
	// acknowledged (it restored neither the checkpoint that held them nor
	// a later one); "" when it did not.
	Lost string
}

// Decide is the startup plan from the state file (nil when absent), the
// slot, the configured mapping and the Feldera deployment. The interesting
// cases are the disagreements: a slot cannot tell whether the tables were
// copied, and Feldera without fault tolerance forgets them on restart.
func Decide(st *state.State, slot Slot, slotName, publication string, tables []Mapping, target Target) Plan {
	switch {
	case st == nil && !slot.Exists:
		return Plan{Snapshot, "no state file and no slot: first run"}
	case st == nil:
		return Plan{Resnapshot, fmt.Sprintf("slot %s exists but there is no state file: a slot is no proof the target was seeded", slotName)}
	}
	for _, t := range st.Tables {
		// An incremental table streams from the slot's creation: its
		// chunks go on from the state's After.
		if t.Status != state.Complete && t.Status != state.Incremental {
			return Plan{Resnapshot, fmt.Sprintf("the snapshot of %s did not complete", t.Source)}
		}
	}
	if !sameMapping(st, slotName, publication, tables) {
		return Plan{Resnapshot, "TABLES, the slot or the publication differ from the state file's"}
	}
	if st.DeploymentID != "" && target.DeploymentID != "" && st.DeploymentID != target.DeploymentID && !target.FaultTolerant {
		return Plan{Resnapshot, fmt.Sprintf("the Feldera pipeline was redeployed (deployment %s, the tables were copied into %s) without fault tolerance: its state is lost", target.DeploymentID, st.DeploymentID)}
	}
	if st.DeploymentID != "" && target.DeploymentID != "" && st.DeploymentID != target.DeploymentID && target.FaultTolerant && target.NoCheckpoint {
		return Plan{Resnapshot, fmt.Sprintf("the Feldera pipeline was redeployed (deployment %s, the tables were copied into %s) and has no checkpoint: it restored nothing (storage cleared), so its state is lost", target.DeploymentID, st.DeploymentID)}
	}
	if target.Lost != "" {
		return Plan{Resnapshot, target.Lost}
	}
	if st.Incarnation != "" && target.Incarnation != "" && st.Incarnation != target.Incarnation && !target.FaultTolerant {
		return Plan{Resnapshot, fmt.Sprintf("the Feldera pipeline restarted in place (incarnation %s, the tables were copied into %s) without fault tolerance: its state is lost", target.Incarnation, st.Incarnation)}
	}
	switch {
	case slot.Diverged != "":
		return Plan{Resnapshot, slot.Diverged}
	case !slot.Exists:
		return Plan{Resnapshot, fmt.Sprintf("slot %s is missing: WAL since the last acknowledgement may be gone", slotName)}
	case slot.WalStatus == "lost":
		return Plan{Resnapshot, fmt.Sprintf("slot %s has wal_status lost: the WAL it needed was removed", slotName)}
	}
	if st.Incremental() {
		return Plan{Stream, "incremental snapshot under way and slot present: streaming, and the chunks go on"}
	}
	return Plan{Stream, "state complete and slot present"}
}

func sameMapping(st *state.State, slotName, publication string, tables []Mapping) bool {
	if st.Slot != slotName || st.Publication != publication || len(st.Tables) != len(tables) {
		return false
	}
	for i, t := range tables {
		if st.Tables[i].Source != t.Source || st.Tables[i].Dest != t.Dest {
			return false
		}
	}
	return true
}
