// Package state keeps pgfeldera's snapshot progress in a small JSON file:
// which tables were copied into Feldera completely under which slot. It
// never records the stream position: the replication slot is the only
// checkpoint of the stream.
//
// Save is atomic and durable: the file is written to a temporary file,
// fsynced, renamed over the old one (renameio), and then the directory is
// fsynced, which renameio does not do. Load distinguishes absence
// (ErrNotExist) from a file that exists but cannot be used (an error naming
// the file): a corrupt state file is never treated as "start from scratch".
package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/renameio/v2"
)

// Version is the state file format this build reads and writes.
const Version = 1

// Table statuses.
const (
	Pending  = "pending"
	Complete = "complete"
	// Incremental: an incremental snapshot (SNAPSHOT_MODE=incremental)
	// is under way; the stream carries the table from the slot's creation,
	// and chunks after After are still to be read.
	Incremental = "incremental"
)

// ErrNotExist means there is no state file: start from scratch.
var ErrNotExist = errors.New("state file does not exist")

// Table is the snapshot progress of one mapped table.
type Table struct {
	Source string `json:"source"` // schema.table in Postgres
	Dest   string `json:"dest"`   // canonical Feldera table name
	Status string `json:"status"` // Pending or Complete
	// Rows and KeyDigest describe what the last complete snapshot made
	// durable, to cross-check Feldera's answers during a retraction.
	Rows      int64  `json:"rows,omitempty"`
	KeyDigest string `json:"key_digest,omitempty"`
	// After is, for an Incremental table, the chunk key (the primary key's
	// columns, in its order, as Postgres prints them) of the last row of
	// the last chunk complete and durable in Feldera; empty before the
	// first. Chunks and Copied count those chunks and their rows.
	After  []string `json:"after,omitempty"`
	Chunks int64    `json:"chunks,omitempty"`
	Copied int64    `json:"copied,omitempty"`
	// Retract is, for an Incremental table a resnapshot started (a
	// request, or a resnapshot decided at startup under
	// SNAPSHOT_MODE=incremental), that the rows Feldera holds and
	// Postgres lacks are still to be
	// deleted (before the chunks are read). The retraction is not
	// resumable: a restart does it again from the start.
	Retract bool `json:"retract,omitempty"`
	// Retracted counts the rows the retraction deleted, this far.
	Retracted int64 `json:"retracted,omitempty"`
	// Lanes are, for an Incremental table read in parallel
	// (SNAPSHOT_PARALLELISM), its ranges of the first key column, each
	// with its own After; empty when the table is one range (After).
	Lanes []Lane `json:"lanes,omitempty"`
	// Request is the id of the resnapshot request that last started this
	// table's incremental snapshot.
	Request string `json:"request,omitempty"`
	// Fingerprint identifies the definition of the Feldera table the rows
	// were written under (its fields and types, key, materialized and
	// other properties): a program change that modifies the table makes
	// Feldera start it empty (bootstrapping), so another fingerprint means
	// the table must be read again.
	Fingerprint string `json:"fingerprint,omitempty"`
	// Columns is the shape the rows were read under: the Postgres columns
	// feeding Feldera fields, as "name type-oid/typmod" (incsession/shape.go).
	Columns []string `json:"columns,omitempty"`
	// Partitions are, for a partitioned table, the leaves whose rows were
	// read (setup/partitions.go).
	// Not omitted when empty: a partitioned table with no partition yet
	// records [] (null: not partitioned, or not recorded yet).
	Partitions []string `json:"partitions"`
	// Blocks is set for an Incremental table read in ranges of its heap's
	// blocks (an ordinary table; snapshot/chunk.go argues why that is
	// exact): then After holds one value, the next block to read, and a
	// lane's Lo and Hi are its blocks [Lo, Hi), in decimal.
	Blocks *Blocks `json:"blocks,omitempty"`
}

// CheckpointRef names a Feldera checkpoint: its UUID, and the step and
// record counts it holds (a restore resumes both from it).
type CheckpointRef struct {
	UUID             string `json:"uuid"`
	Steps            uint64 `json:"steps"`
	ProcessedRecords uint64 `json:"processed_records"`
	// Before are the UUIDs of the checkpoints listed before it when it
	// was recorded (the newest few): Feldera drops checkpoints oldest
	// first, so one of them listed without it means a restore went back.
	Before []string `json:"before,omitempty"`
}

// Blocks is the plan of a table read in block ranges: the relfilenode its
// blocks belong to (a rewrite changes it, and the table is then read
// again from its first block) and how many blocks it had when planned.
type Blocks struct {
	Filenode uint32 `json:"filenode"`
	End      uint32 `json:"end"`
}

// Lane is one range of a table read in parallel: keys whose first column
// is above Lo and at most Hi (unbounded when unset), as Postgres prints
// the column; After is the last durable chunk's key in it, Done that the
// range is read.
type Lane struct {
	Lo    *string  `json:"lo,omitempty"`
	Hi    *string  `json:"hi,omitempty"`
	After []string `json:"after,omitempty"`
	Done  bool     `json:"done,omitempty"`
}

// Request is a resnapshot request (`pgfeldera resnapshot`) as the
// connector received it from the stream: the tables it names, and whether
// they are exact again (Done) or why it was refused.
type Request struct {
	ID      string   `json:"id"`
	Tables  []string `json:"tables"`
	Done    bool     `json:"done,omitempty"`
	Refused string   `json:"refused,omitempty"`
}

// MaxRequests is how many resnapshot requests the state file remembers
// (the oldest are forgotten): enough for a replay of the stream to
// recognise a request it already took.
const MaxRequests = 64

// State is the content of the state file.
type State struct {
	Version     int    `json:"version"`
	Slot        string `json:"slot"`
	Publication string `json:"publication"`
	// DeploymentID is the Feldera deployment the tables were copied into:
	// another one (a restart without fault tolerance) has lost them.
	DeploymentID string `json:"deployment_id,omitempty"`
	// Incarnation is the Feldera process (/stats incarnation_uuid) the
	// tables were copied into: without fault tolerance, another one has
	// lost them even under the same deployment.
	Incarnation string `json:"incarnation_uuid,omitempty"`
	// ProgramVersion is the Feldera program_version the tables were copied
	// under: under exactly_once a program change discards the journal.
	ProgramVersion int64 `json:"program_version,omitempty"`
	// SystemID and Timeline are the Postgres cluster (IDENTIFY_SYSTEM) and
	// timeline the tables were last streamed from: another cluster has
	// none of them, and a new timeline (a failover) may have forked before
	// what Feldera holds.
	SystemID string `json:"system_identifier,omitempty"`
	Timeline int32  `json:"timeline,omitempty"`
	// Checkpoint is the newest Feldera checkpoint known to hold everything
	// acknowledged. Under at_least_once it is written before an
	// acknowledgement relies on it; a restart must have restored it, or a
	// later one, or the acknowledged rows may be gone.
	Checkpoint *CheckpointRef `json:"checkpoint,omitempty"`
	// JournalGap is set while, under exactly_once, a program change has
	// discarded Feldera's input journal and no checkpoint was taken since:
	// the UUID of the newest checkpoint when the change was seen ("-" when
	// there was none). Until a checkpoint after it, completion is not
	// durable.
	JournalGap string `json:"journal_gap,omitempty"`
	// ProgressKept is set once a session with the progress table
	// acknowledged a position: from then on the slot never passes the
	// row Feldera holds (delivery.Ledger.KeepRows), so a row below the
	// slot, or none, means Feldera lost acknowledged data
	// (setup.ProgressLost). Cleared before the row is reset (a new slot,
	// a failover) and by a session without the table.
	ProgressKept bool `json:"progress_kept,omitempty"`
	// ProgressFingerprint is the progress table's definition
	// (setup.Fingerprint) when the row was kept: a row missing under
	// another definition was emptied by Feldera's program change, not
	// lost with the data.
	ProgressFingerprint string  `json:"progress_fingerprint,omitempty"`
	Tables              []Table `json:"tables"`
	// Requests are the resnapshot requests received, oldest first.
	Requests []Request `json:"requests,omitempty"`
}

// Request returns the resnapshot request with id, or nil.
func (s *State) Request(id string) *Request {
	for i := range s.Requests {
		if s.Requests[i].ID == id {
			return &s.Requests[i]
		}
	}
	return nil
}

// AddRequest remembers a request, forgetting the oldest beyond MaxRequests.
func (s *State) AddRequest(r Request) {
	s.Requests = append(s.Requests, r)
	if n := len(s.Requests) - MaxRequests; n > 0 {
		s.Requests = append(s.Requests[:0:0], s.Requests[n:]...)
	}
}

// CarryRequests keeps old's resnapshot requests in s, a state that
// replaces old because the connector resnapshots every table (so a
// `pgfeldera resnapshot --wait` waiting on one sees it end). A request
// still open whose tables s lists settles once they are read again; one
// naming a table s no longer lists is refused, naming it.
func (s *State) CarryRequests(old *State) {
	if old == nil {
		return
	}
	for _, r := range old.Requests {
		if !r.Done && r.Refused == "" {
			for _, name := range r.Tables {
				if !slices.ContainsFunc(s.Tables, func(t Table) bool { return t.Source == name }) {
					r.Refused = fmt.Sprintf("the connector resnapshotted its tables, and %s is no longer one of them", name)
					break
				}
			}
		}
		r.Tables = slices.Clone(r.Tables)
		s.AddRequest(r)
	}
}

// SettleRequests marks done each request whose tables are all complete.
func (s *State) SettleRequests() {
	for i := range s.Requests {
		r := &s.Requests[i]
		if r.Done || r.Refused != "" {
			continue
		}
		done := true
		for _, name := range r.Tables {
			for _, t := range s.Tables {
				if t.Source == name && t.Status != Complete {
					done = false
				}
			}
		}
		r.Done = done
	}
}

// Incremental reports whether some table's incremental snapshot is under
// way.
func (s *State) Incremental() bool {
	for _, t := range s.Tables {
		if t.Status == Incremental {
			return true
		}
	}
	return false
}

// Complete reports whether every table's snapshot is complete.
func (s *State) Complete() bool {
	for _, t := range s.Tables {
		if t.Status != Complete {
			return false
		}
	}
	return len(s.Tables) > 0
}

// Load reads the state file. A missing file is ErrNotExist; a file that
// cannot be read, parsed, or is of another version is an error naming it.
func Load(path string) (*State, error) {
	b, err := readFile(path, "state file")
	if err != nil {
		return nil, err
	}
	var s State
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("state file %s is corrupt (%v); fix or remove it to resnapshot", path, err)
	}
	if s.Version != Version {
		return nil, fmt.Errorf("state file %s has version %d, this pgfeldera reads version %d", path, s.Version, Version)
	}
	for _, t := range s.Tables {
		if t.Status != Pending && t.Status != Complete && t.Status != Incremental {
			return nil, fmt.Errorf("state file %s: table %s has unknown status %q", path, t.Source, t.Status)
		}
	}
	return &s, nil
}

// readFile reads path: ErrNotExist when it is missing, else errors name
// the file.
func readFile(path, what string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNotExist
	}
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", what, path, err)
	}
	return b, nil
}

// Save writes the state atomically and durably, with mode 0600.
func Save(path string, s *State) error {
	s.Version = Version
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	dir := filepath.Dir(path)
	pf, err := renameio.NewPendingFile(path, renameio.WithPermissions(0o600), renameio.WithTempDir(dir))
	if err != nil {
		return fmt.Errorf("state file %s: %w", path, err)
	}
	defer pf.Cleanup()
	if _, err := pf.Write(b); err != nil {
		return fmt.Errorf("state file %s: write: %w", path, err)
	}
	if err := pf.CloseAtomicallyReplace(); err != nil {
		return fmt.Errorf("state file %s: replace: %w", path, err)
	}
	return syncDir(dir)
}

// syncDir makes the rename itself durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("state dir %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("state dir %s: fsync: %w", dir, err)
	}
	return nil
}

// RemoveStale removes the temporary files that an interrupted Save or
// SaveFence of stateFile left behind (renameio names them "." + the file's
// name + digits), and returns their names. Nothing else is touched.
func RemoveStale(stateFile string) ([]string, error) {
	dir, base := filepath.Dir(stateFile), filepath.Base(stateFile)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("state dir %s: %w", dir, err)
	}
	var removed []string
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !(isTemp(name, "."+base) || isTemp(name, "."+base+".fence")) {
			continue
		}
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			return removed, fmt.Errorf("state dir %s: remove stale %s: %w", dir, name, err)
		}
		removed = append(removed, name)
	}
	return removed, nil
}

func isTemp(name, prefix string) bool {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok || rest == "" {
		return false
	}
	for _, c := range rest {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
