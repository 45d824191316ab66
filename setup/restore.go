package setup

import (
	"fmt"
	"log/slog"
	"slices"

	"github.com/pgfeldera/pgfeldera/delivery"
	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/internal/fatal"
	"github.com/pgfeldera/pgfeldera/state"
)

// What a restored Feldera holds. Feldera keeps state across its restarts
// under fault tolerance, but not everything, and not always:
//
//   - a program change bootstraps: a table whose definition changed starts
//     empty (docs.feldera.com/docs/pipelines/modifying.md), the others keep
//     what the stop's checkpoint holds; the state file records each table's
//     definition (fingerprint) to tell which;
//   - under exactly_once the change discards the input journal, and none
//     is kept until the next checkpoint (JournalGap): completion is not
//     durable meanwhile, so the checkpoint gate applies until one comes;
//   - a pipeline can come back with an empty store or an older checkpoint:
//     the state file records the checkpoint that held everything
//     acknowledged, and a start that finds neither it nor a later one
//     resnapshots (RestoredEnough).

// RestoredEnough reports whether the checkpoints a fault-tolerant Feldera
// lists can hold what the state file says was acknowledged: rec, the
// checkpoint recorded as holding it, or only later ones. Feldera drops old
// checkpoints oldest first, so rec may have rolled out of the list behind
// newer ones, but then so did every checkpoint before it, and every one
// left is later: at least rec's steps and processed records (both only
// grow within one history; a restore resumes both from the restored
// checkpoint, and an empty store from zero). A checkpoint listed from
// before rec, or one with fewer steps or records, means the pipeline went
// back. When it did, why says what was found.
func RestoredEnough(rec *state.CheckpointRef, cps []feldera.Checkpoint) (ok bool, why string) {
	if rec == nil {
		return true, ""
	}
	if len(cps) == 0 {
		return false, fmt.Sprintf("Feldera lists no checkpoint (its storage is empty, or was cleared): checkpoint %s (%d records processed), which held everything pgfeldera acknowledged, is gone", rec.UUID, rec.ProcessedRecords)
	}
	for _, cp := range cps {
		if cp.UUID == rec.UUID {
			return true, ""
		}
	}
	for _, cp := range cps {
		if slices.Contains(rec.Before, cp.UUID) {
			return false, fmt.Sprintf("Feldera restored an older checkpoint: it lists %s, taken before checkpoint %s (%d records, steps %d), which held everything pgfeldera acknowledged, and not that one",
				cp.UUID, rec.UUID, rec.ProcessedRecords, rec.Steps)
		}
	}
	oldest := cps[0]
	if oldest.Steps < rec.Steps || oldest.ProcessedRecords < rec.ProcessedRecords {
		return false, fmt.Sprintf("Feldera restored an older state: its oldest checkpoint, %s (%d records, steps %d), is behind checkpoint %s (%d records, steps %d), which held everything pgfeldera acknowledged",
			oldest.UUID, oldest.ProcessedRecords, oldest.Steps, rec.UUID, rec.ProcessedRecords, rec.Steps)
	}
	return true, ""
}

// journalResumed reports whether a checkpoint was taken after the journal
// gap began (gap: the newest checkpoint's UUID then, "-" for none).
func journalResumed(gap string, cps []feldera.Checkpoint) bool {
	if len(cps) == 0 {
		return false
	}
	if gap == "-" {
		return true
	}
	for i, cp := range cps {
		if cp.UUID == gap {
			return i < len(cps)-1
		}
	}
	return true // the gap's checkpoint rolled out of the list: newer ones replaced it
}

// refBefore keeps this many of the checkpoints listed before a recorded one.
const refBefore = 16

// CheckpointRef names the newest checkpoint of a list for the state file, with the
// ones listed before it.
func CheckpointRef(cps []feldera.Checkpoint) *state.CheckpointRef {
	cp := cps[len(cps)-1]
	r := &state.CheckpointRef{UUID: cp.UUID, Steps: cp.Steps, ProcessedRecords: cp.ProcessedRecords}
	for _, b := range cps[max(0, len(cps)-1-refBefore) : len(cps)-1] {
		r.Before = append(r.Before, b.UUID)
	}
	return r
}

// Reconcile brings the state file of a start that streams from the slot
// up to what Feldera is now:
//
//   - a table whose definition changed since its rows were written was
//     started empty by Feldera: it is read again, incrementally (its
//     retraction first), while the rest streams; a keyless one cannot be
//     read that way, and then why names it, for a resnapshot of every
//     table;
//   - a partitioned table whose partitions moved since its rows were read
//     is read again the same way (Rules.reconcilePartitions);
//   - under exactly_once a program change opens a journal gap, closed by
//     the first checkpoint after it; while it is open the checkpoint gate
//     applies (p.Gate);
//   - the fingerprints, the program version and the newest checkpoint are
//     recorded (RestoredEnough has passed: that checkpoint holds
//     everything acknowledged).
//
// It saves the state when anything changed.
func Reconcile(p *Plan, st *state.State, c Rules) (why string, err error) {
	changed := false
	for i := range st.Tables {
		t := &st.Tables[i]
		fp := Fingerprint(p.Targets[i].Dest)
		switch {
		case t.Fingerprint == fp:
			continue
		case c.TrustRestores:
			continue
		case SameDefinition(t.Fingerprint, p.Targets[i].Dest):
			// Recorded under the hash before this one: the same
			// definition, recorded again under this one.
		case t.Fingerprint == "":
			// Written before fingerprints were: the rows are taken to be
			// of the current definition.
		case !p.Rels[i].Keyed():
			return fmt.Sprintf("the definition of Feldera table %s changed since %s was copied into it: Feldera started it empty, and a keyless table is read again only with every table", t.Dest, t.Source), nil
		default:
			c.Logger.Warn("startup: the definition of a Feldera table changed: Feldera started it empty (bootstrapping after a program change); reading it again while the other tables stream",
				"table", t.Dest, "source", t.Source)
			*t = state.Table{Source: t.Source, Dest: t.Dest, Status: state.Incremental, Retract: true, Columns: t.Columns, Partitions: t.Partitions}
		}
		t.Fingerprint = fp
		changed = true
	}
	for i := range st.Tables {
		moved, why := c.reconcilePartitions(&st.Tables[i], p.Leaves[i], p.Rels[i].Keyed())
		if why != "" {
			return why, nil
		}
		changed = changed || moved
	}
	if p.Model == feldera.FTExactlyOnce && st.ProgramVersion != 0 && p.ProgramVersion != 0 && st.ProgramVersion != p.ProgramVersion && st.JournalGap == "" {
		st.JournalGap = "-"
		if n := len(p.Checkpoints); n > 0 {
			st.JournalGap = p.Checkpoints[n-1].UUID
		}
		changed = true
		c.Logger.Warn("startup: the Feldera program changed under exactly_once: Feldera discarded its input journal and keeps none until its next checkpoint; acknowledging only what a checkpoint covers until then",
			"program_version", p.ProgramVersion, "was", st.ProgramVersion)
	}
	if st.ProgramVersion != p.ProgramVersion {
		st.ProgramVersion, changed = p.ProgramVersion, true
	}
	if st.JournalGap != "" && (p.Model != feldera.FTExactlyOnce || journalResumed(st.JournalGap, p.Checkpoints)) {
		st.JournalGap, changed = "", true
		c.Logger.Info("startup: a checkpoint was taken since the program change: Feldera journals its input again")
	}
	if st.JournalGap != "" && p.Gate == delivery.GateComplete && !c.GateForced {
		p.Gate = delivery.GateCheckpoint
	}
	if n := len(p.Checkpoints); p.FaultTolerant && n > 0 && (st.Checkpoint == nil || st.Checkpoint.UUID != p.Checkpoints[n-1].UUID) {
		st.Checkpoint, changed = CheckpointRef(p.Checkpoints), true
	}
	if changed {
		if err := state.Save(c.StateFile, st); err != nil {
			return "", fatal.Wrap(err)
		}
	}
	return "", nil
}

// Rules are what Reconcile reads besides the plan and the state: where
// the state is saved, the log, and the tests' unsafe variants.
type Rules struct {
	StateFile string
	Logger    *slog.Logger
	// TrustRestores checks nothing a restart restored (unsafe).
	TrustRestores bool
	// IgnoreShape reads no table again when its partitions moved (unsafe).
	IgnoreShape bool
	// GateForced: a test chose the gate; a journal gap leaves it.
	GateForced bool
}
