package snapshot

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/pgfeldera/pgfeldera/internal/fatal"
)

// spoolPrefix names the spool files of a slot: only this connector
// writes them, so one a crashed process left is removed at the next
// first spool (cleanSpools).
func (l *Loader) spoolPrefix() (dir, prefix string) {
	return filepath.Dir(l.StateFile), ".pgfeldera-retract-" + l.Slot + "-"
}

// cleanSpools removes the spool files an earlier process left, once per
// process.
func (l *Loader) cleanSpools() {
	l.spoolOnce.Do(func() {
		dir, prefix := l.spoolPrefix()
		if stale, _ := filepath.Glob(filepath.Join(dir, prefix+"*")); len(stale) > 0 {
			for _, name := range stale {
				os.Remove(name)
			}
			l.Logger.Info("retract: removed spool files an earlier process left", "files", len(stale))
		}
	})
}

// SpoolQuery runs sql on Feldera and writes its rows, one a line, to a
// new spool; table names the table for errors.
func (l *Loader) SpoolQuery(ctx context.Context, sql, table string) (*Spool, error) {
	l.cleanSpools()
	dir, prefix := l.spoolPrefix()
	f, err := os.CreateTemp(dir, prefix)
	if err != nil {
		return nil, fatal.Wrap(fmt.Errorf("spool file for Feldera table %s: %w", table, err))
	}
	sp := NewSpool(f)
	err = l.Sender.Query(ctx, sql, func(row json.RawMessage) error { return sp.Add(row) })
	if err != nil {
		sp.Close()
		return nil, queryHint(err, table)
	}
	if err := sp.Flush(); err != nil {
		sp.Close()
		return nil, fatal.Wrap(fmt.Errorf("spool file %s for Feldera table %s: %w", f.Name(), table, err))
	}
	if err := sp.Rewind(); err != nil {
		sp.Close()
		return nil, err
	}
	return sp, nil
}
