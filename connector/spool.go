package connector

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/pgfeldera/pgfeldera/incremental"
	"github.com/pgfeldera/pgfeldera/internal/fatal"
)

// spoolPrefix names the spool files of a slot: only this connector
// writes them, so one a crashed process left is removed at the next
// first spool (cleanSpools).
func (c *Connector) spoolPrefix() (dir, prefix string) {
	return filepath.Dir(c.cfg.StateFile), ".pgfeldera-retract-" + c.cfg.Slot + "-"
}

// cleanSpools removes the spool files an earlier process left, once per
// process.
func (c *Connector) cleanSpools() {
	c.spoolOnce.Do(func() {
		dir, prefix := c.spoolPrefix()
		if stale, _ := filepath.Glob(filepath.Join(dir, prefix+"*")); len(stale) > 0 {
			for _, name := range stale {
				os.Remove(name)
			}
			c.logger.Info("retract: removed spool files an earlier process left", "files", len(stale))
		}
	})
}

// spoolQuery runs sql on Feldera and writes its rows, one a line, to a
// new spool; table names the table for errors.
func (c *Connector) spoolQuery(ctx context.Context, sql, table string) (*incremental.Spool, error) {
	c.cleanSpools()
	dir, prefix := c.spoolPrefix()
	f, err := os.CreateTemp(dir, prefix)
	if err != nil {
		return nil, fatal.Wrap(fmt.Errorf("spool file for Feldera table %s: %w", table, err))
	}
	sp := incremental.NewSpool(f)
	err = c.out.Query(ctx, sql, func(row json.RawMessage) error { return sp.Add(row) })
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
