package connector

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// A spool holds the rows of one ad-hoc query in a file beside the state
// file. A retraction reads Feldera's answer whole first, then deletes in
// batches that wait for completion: never inside the query's answer,
// whose idle timer (FELDERA_REQUEST_TIMEOUT) would end it while a batch
// waits for a slow step. Memory stays bounded by a line.
type spool struct {
	f    *os.File
	rows int
}

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
func (c *Connector) spoolQuery(ctx context.Context, sql, table string) (*spool, error) {
	c.cleanSpools()
	dir, prefix := c.spoolPrefix()
	f, err := os.CreateTemp(dir, prefix)
	if err != nil {
		return nil, fatal(fmt.Errorf("spool file for Feldera table %s: %w", table, err))
	}
	sp := &spool{f: f}
	bw := bufio.NewWriter(f)
	err = c.query(ctx, sql, func(row json.RawMessage) error {
		sp.rows++
		bw.Write(bytes.TrimSpace(row))
		return bw.WriteByte('\n')
	})
	if err != nil {
		sp.close()
		return nil, queryHint(err, table)
	}
	if err := bw.Flush(); err != nil {
		sp.close()
		return nil, fatal(fmt.Errorf("spool file %s for Feldera table %s: %w", f.Name(), table, err))
	}
	if _, err := f.Seek(0, 0); err != nil {
		sp.close()
		return nil, err
	}
	return sp, nil
}

// each calls fn with every spooled row, in order; fn may keep it.
func (sp *spool) each(fn func(row []byte) error) error {
	sc := bufio.NewScanner(sp.f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		if err := fn(append([]byte(nil), sc.Bytes()...)); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fatal(fmt.Errorf("spool file %s: %w", sp.f.Name(), err))
	}
	return nil
}

func (sp *spool) close() {
	sp.f.Close()
	os.Remove(sp.f.Name())
}
