package state

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/google/renameio/v2"
)

// Fence is the ingress fence record, kept in its own file beside the state
// file (FencePath). An ingress request that got no clear answer may still
// be applied by Feldera up to its ingress timeout later, after anything
// newer; the connector sends nothing before Until. Running is set while a
// process runs and cleared when it returns. Outstanding is set while an
// ingress request is unanswered (or got an answer that does not prove
// Feldera is done with it): a record still marked running with a request
// outstanding belongs to a process that died with a request Feldera may
// still apply, so the next one waits until Outstanding.Written plus the
// fence. A record marked running with nothing outstanding needs no wait.
type Fence struct {
	Version     int          `json:"version"`
	Running     bool         `json:"running"`
	PID         int          `json:"pid,omitempty"`
	Until       time.Time    `json:"until,omitempty"`
	Outstanding *Outstanding `json:"outstanding,omitempty"`
	// Transaction is the Feldera transaction this process opened and has
	// not seen committed: the next process commits it, so a crash never
	// leaves one open (Feldera's checkpoints wait for it).
	Transaction *OpenTransaction `json:"transaction,omitempty"`
	// Past is what Feldera holds past the progress row, counted.
	Past *PastRow `json:"past,omitempty"`
	// Partial is the last Feldera transaction pgfeldera committed
	// holding part of a source transaction (views saw a prefix of it):
	// kept across processes for `pgfeldera status`.
	Partial *PartialCommit `json:"partial_commit,omitempty"`
}

// PartialCommit is a Feldera transaction committed with part of a source
// transaction in it, and why.
type PartialCommit struct {
	TransactionID int64     `json:"transaction_id"`
	At            time.Time `json:"at"`
	Why           string    `json:"why"`
}

// OpenTransaction is a Feldera API transaction pgfeldera started. ID 0:
// the start was sent and its answer not yet recorded.
type OpenTransaction struct {
	ID          int64     `json:"id"`
	Incarnation string    `json:"incarnation"` // the pipeline process it lives in (IDs are per process)
	Since       time.Time `json:"since"`
	// Whole says every POST of it was answered, the progress row last:
	// it holds whole source transactions, and committing it shows no
	// prefix (delivery.Transactions.Whole).
	Whole bool `json:"whole,omitempty"`
	// Through bounds the WAL positions of the changes POSTed into it
	// (failover.SentBound, recorded before each POST): after a failover,
	// a fork before it means the transaction holds rows the new primary
	// never had.
	Through uint64 `json:"through,omitempty"`
}

// PastRow is what Feldera holds of the stream past the progress row Row
// (delivery/txncount.go): per table, how many records its HTTP ingress
// endpoints had taken (/stats total_records) just before the first POST
// of the stream's rows of it past Row, in pipeline process Counted.
// Whatever they took since, in the same process, Feldera holds past the
// row, committed or in a transaction left open.
type PastRow struct {
	Row     uint64            `json:"row"`
	Taken   map[string]uint64 `json:"taken,omitempty"`
	Counted string            `json:"counted,omitempty"`
}

// Outstanding is an ingress request without a conclusive answer.
type Outstanding struct {
	Table string    `json:"table"`
	Since time.Time `json:"since"`           // the request started
	Wrote time.Time `json:"wrote,omitzero"`  // its last body byte was written; zero: not (yet) known
	Rows  int       `json:"rows,omitempty"`  // for the log
	Cause string    `json:"cause,omitempty"` // why it is still outstanding after an answer
}

// FencePath is the fence file that goes with a state file.
func FencePath(stateFile string) string { return stateFile + ".fence" }

// fenceRecordSize is the least size of a fence record: every in-place
// write covers the whole file, padded with spaces, so no shorter record
// leaves the tail of a longer one behind. A record that needs more (an
// open transaction's counts over many tables) grows the file by whole
// units, and later records keep the grown size.
const fenceRecordSize = 1024

// encode pads the record to at least size bytes (fenceRecordSize units).
func (f *Fence) encode(size int) ([]byte, error) {
	f.Version = Version
	b, err := json.Marshal(f)
	if err != nil {
		return nil, err
	}
	size = max(size, (len(b)/fenceRecordSize+1)*fenceRecordSize)
	rec := bytes.Repeat([]byte{' '}, size)
	copy(rec, b)
	rec[size-1] = '\n'
	return rec, nil
}

// LoadFence reads a fence file: ErrNotExist when there is none, an error
// naming the file when it cannot be used.
func LoadFence(path string) (*Fence, error) {
	b, err := readFile(path, "fence file")
	if err != nil {
		return nil, err
	}
	var f Fence
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("fence file %s is corrupt: %v", path, err)
	}
	if f.Version != Version {
		return nil, fmt.Errorf("fence file %s has version %d, this pgfeldera reads version %d", path, f.Version, Version)
	}
	return &f, nil
}

// SaveFence writes a fence file atomically and durably.
func SaveFence(path string, f *Fence) error {
	b, err := f.encode(fenceRecordSize)
	if err != nil {
		return err
	}
	if err := renameio.WriteFile(path, b, 0o600, renameio.WithTempDir(filepath.Dir(path))); err != nil {
		return fmt.Errorf("fence file %s: %w", path, err)
	}
	return syncDir(filepath.Dir(path))
}

// FenceFile is the fence file of a running process. Open and Close write
// it durably (rename, fsync); the per-request marks in between are
// rewritten in place without fsync. Safe for concurrent use.
//
// Why no fsync for the marks: they only need to survive the death of this
// process (SIGKILL, OOM, a crash point), and a process death leaves the
// kernel's page cache, which holds the write, intact: the next process on
// this machine reads it. Losing the page cache takes a machine crash or
// reboot, or moving the volume to another machine (a detach unmounts, and
// an unmount writes the cache out); a reboot lasts longer than the fence
// (FELDERA_INGRESS_FENCE, 35 s by default: Feldera's manager forwards an
// ingress request for at most 30 s), so any request of the dead process can
// no longer land when the next one starts. An fsync per request would cost
// milliseconds on every POST to cover a case that cannot occur.
type FenceFile struct {
	mu   sync.Mutex
	path string
	f    *os.File
	rec  Fence
	size int // the file's size: every record covers it
}

// OpenFence records durably that this process runs, then keeps the file
// open for the per-request marks.
func OpenFence(path string, until time.Time) (*FenceFile, error) {
	ff := &FenceFile{path: path, rec: Fence{Running: true, PID: os.Getpid(), Until: until}}
	if err := SaveFence(path, &ff.rec); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("fence file %s: %w", path, err)
	}
	ff.f, ff.size = f, fenceRecordSize
	return ff, nil
}

func (ff *FenceFile) write() error {
	b, err := ff.rec.encode(ff.size)
	if err != nil {
		return err
	}
	if _, err := ff.f.WriteAt(b, 0); err != nil {
		return fmt.Errorf("fence file %s: %w", ff.path, err)
	}
	ff.size = len(b)
	return nil
}

// Outstanding marks a request as sent and not yet answered. It must be
// written before the first byte of the request leaves.
func (ff *FenceFile) Outstanding(table string, rows int, since time.Time) error {
	ff.mu.Lock()
	defer ff.mu.Unlock()
	ff.rec.Outstanding = &Outstanding{Table: table, Rows: rows, Since: since}
	return ff.write()
}

// Wrote records when the outstanding request's last byte was written: the
// fence counts from it.
func (ff *FenceFile) Wrote(at time.Time) error {
	ff.mu.Lock()
	defer ff.mu.Unlock()
	if ff.rec.Outstanding == nil {
		return nil
	}
	ff.rec.Outstanding.Wrote = at
	return ff.write()
}

// Answered clears the mark: the request got an answer that proves Feldera
// will not apply it later (a token, a refusal, an error that stopped it
// before it was read).
func (ff *FenceFile) Answered() error {
	ff.mu.Lock()
	defer ff.mu.Unlock()
	if ff.rec.Outstanding == nil {
		return nil
	}
	ff.rec.Outstanding = nil
	return ff.write()
}

// Unclear keeps the mark after an answer that does not settle the request
// (a timeout, a dropped connection, a gateway 503) and says why.
func (ff *FenceFile) Unclear(cause string) error {
	ff.mu.Lock()
	defer ff.mu.Unlock()
	if ff.rec.Outstanding == nil {
		return nil
	}
	ff.rec.Outstanding.Cause = cause
	return ff.write()
}

// Transaction records the Feldera transaction open (nil: none). The
// record written before start_transaction (t.ID 0: asked, no answer yet)
// is fsynced: a crash of the machine must not lose it, or the
// transaction would stay open in Feldera with no process that knows it
// is its own, and every start would meet 409 TransactionInProgress. The
// other records are written in place without an fsync, like the request
// marks: a crash of the machine that loses the ID leaves the one before
// it, ID 0, and the next start takes the API's transaction for it
// (delivery.Transactions.Settle); one that loses the clearing leaves a
// record of a transaction Feldera no longer holds, which the next start
// finds gone.
func (ff *FenceFile) Transaction(t *OpenTransaction) error {
	ff.mu.Lock()
	defer ff.mu.Unlock()
	ff.rec.Transaction = t
	if err := ff.write(); err != nil {
		return err
	}
	if t != nil && t.ID == 0 {
		if err := ff.f.Sync(); err != nil {
			return fmt.Errorf("fence file %s: %w", ff.path, err)
		}
	}
	return nil
}

// Past records what Feldera holds past the progress row (nil: nothing
// counted).
func (ff *FenceFile) Past(p *PastRow) error {
	ff.mu.Lock()
	defer ff.mu.Unlock()
	ff.rec.Past = p
	return ff.write()
}

// PartialCommitted records the last partial commit (PartialCommit).
func (ff *FenceFile) PartialCommitted(p *PartialCommit) error {
	ff.mu.Lock()
	defer ff.mu.Unlock()
	ff.rec.Partial = p
	return ff.write()
}

// Close records durably that this process stopped, with the fence
// deadline (zero: none) the next process must honour.
func (ff *FenceFile) Close(until time.Time) error {
	ff.mu.Lock()
	defer ff.mu.Unlock()
	ff.f.Close()
	return SaveFence(ff.path, &Fence{Until: until, Transaction: ff.rec.Transaction, Past: ff.rec.Past, Partial: ff.rec.Partial})
}
