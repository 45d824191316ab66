package snapshot

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/decode"
	"github.com/pgfeldera/pgfeldera/delivery"
	"github.com/pgfeldera/pgfeldera/feldera"
)

// fakeFeldera holds the keys of one table: a query for them answers
// each, a COUNT(*) how many are left, and a delete line removes one.
type fakeFeldera struct {
	keys    map[string]bool
	pushes  int
	queries []string
}

func (f *fakeFeldera) Ingress(_ context.Context, table string, body []byte) (string, error) {
	f.pushes++
	for _, line := range strings.Split(strings.TrimSpace(string(body)), "\n") {
		var d struct{ Delete json.RawMessage }
		if err := json.Unmarshal([]byte(line), &d); err != nil || d.Delete == nil {
			return "", fmt.Errorf("not a delete line: %q", line)
		}
		delete(f.keys, string(d.Delete))
	}
	return fmt.Sprintf("%s:%d", table, f.pushes), nil
}

func (f *fakeFeldera) WaitCompleteStep(context.Context, string) (uint64, error) { return 1, nil }

func (f *fakeFeldera) Query(_ context.Context, sql string, fn func(json.RawMessage) error) error {
	f.queries = append(f.queries, sql)
	if strings.HasPrefix(sql, "SELECT COUNT(*)") {
		return fn(json.RawMessage(fmt.Sprintf(`{"count(*)":%d}`, len(f.keys))))
	}
	for k := range f.keys {
		if err := fn(json.RawMessage(k)); err != nil {
			return err
		}
	}
	return nil
}

type loaderCounters struct {
	step                                   atomic.Uint64
	batches, flushSince, progress          atomic.Int64
	snapshotRows, retracted, estimate, got atomic.Int64
	flushFailed                            atomic.Bool
}

func newLoader(t *testing.T, sink delivery.Sink, n *loaderCounters) *Loader {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	fence := delivery.NewFence(time.Second, logger)
	s := &delivery.Sender{
		Sink: sink, Fence: fence, Txns: &delivery.Transactions{Fence: fence, Logger: logger}, Observer: nopObserver{}, Logger: logger,
		HardStop: context.WithoutCancel, CompletionTimeout: time.Second, NeedStep: func() bool { return true },
		Batches: &n.batches, FlushSince: &n.flushSince, FlushFailed: &n.flushFailed,
	}
	return &Loader{
		Sender: s, Bounds: delivery.Bounds{Rows: 2, Bytes: 1 << 20},
		StateFile: filepath.Join(t.TempDir(), "state.json"), Slot: "s1",
		Table:        func(int) (*atomic.Int64, *atomic.Int64) { return &n.estimate, &n.got },
		SnapshotRows: &n.snapshotRows, Retracted: &n.retracted, Progress: &n.progress, Logger: logger,
	}
}

type nopObserver struct{}

func (nopObserver) Batch(int, time.Duration, time.Duration) {}
func (nopObserver) FelderaError(string)                     {}

func keyedRel() (*decode.Rel, []*decode.Target) {
	dest := feldera.Relation{Name: "t", PrimaryKey: []string{"id"}, Fields: []feldera.Field{{Name: "id", ColumnType: feldera.ColumnType{Type: "INTEGER"}}}}
	target := &decode.Target{Schema: "public", Name: "t", Dest: dest}
	return &decode.Rel{Target: target}, []*decode.Target{target}
}

// RetractAll reads the table's keys into a spool, deletes them in
// batches of BATCH_MAX_ROWS, each waited for, and checks the count; a
// spool file an earlier process left is removed first, and the spool
// goes with the retraction.
func TestLoader_RetractAll(t *testing.T) {
	fel := &fakeFeldera{keys: map[string]bool{}}
	for i := range 5 {
		fel.keys[fmt.Sprintf(`{"id":%d}`, i)] = true
	}
	var n loaderCounters
	l := newLoader(t, fel, &n)
	dir, prefix := l.spoolPrefix()
	stale := filepath.Join(dir, prefix+"left")
	if err := os.WriteFile(stale, []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rel, targets := keyedRel()
	if err := l.RetractAll(context.Background(), targets, rel); err != nil {
		t.Fatal(err)
	}
	if len(fel.keys) != 0 || fel.pushes != 3 || n.retracted.Load() != 5 || n.batches.Load() != 3 {
		t.Fatalf("left %d keys after %d pushes, retracted %d, batches %d; want 0, 3 (batches of 2), 5, 3",
			len(fel.keys), fel.pushes, n.retracted.Load(), n.batches.Load())
	}
	if want := []string{`SELECT "id" FROM "t"`, `SELECT COUNT(*) FROM "t"`}; strings.Join(fel.queries, ";") != strings.Join(want, ";") {
		t.Fatalf("queries %q, want %q", fel.queries, want)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, prefix+"*")); len(left) != 0 {
		t.Fatalf("spool files left: %v", left)
	}
}

// A table that still holds rows after the retraction fails the
// cross-check: an empty or wrong answer is never taken on trust.
func TestLoader_VerifyCount(t *testing.T) {
	fel := &fakeFeldera{keys: map[string]bool{`{"id":1}`: true}}
	var n loaderCounters
	l := newLoader(t, fel, &n)
	rel, _ := keyedRel()
	if err := l.verifyCount(context.Background(), rel.Target, 1); err != nil {
		t.Fatalf("one row, one expected: %v", err)
	}
	err := l.verifyCount(context.Background(), rel.Target, 0)
	if err == nil || !strings.Contains(err.Error(), "cross-check failed: Feldera table t holds 1 rows, expected 0") {
		t.Fatalf("verifyCount = %v, want the cross-check failure", err)
	}
}
