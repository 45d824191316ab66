package delivery

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/jackc/pglogrepl"
	"github.com/pgfeldera/pgfeldera/feldera"
)

// Progress is a slot's row in the pipeline's progress table
// (setup.ProgressTable): the end LSN of the last whole source transaction
// Feldera holds from the slot. Every Feldera transaction the stream
// commits carries it as its last record (Sender.Send), so every state
// Feldera can show or restore holds exactly the transactions at or below
// it: Feldera takes no checkpoint while a transaction is open or
// committing (DURABILITY.md §1). A session reads it first and skips what
// it covers.
//
// The row is keyed by its source, in the slot column: the Postgres
// cluster's system identifier (a physical standby shares it, so a
// failover keeps the key), the database and the slot, as
// "<system identifier>/<database>/<slot>". Two sidecars that read two
// servers into one pipeline with the same slot name each keep their own
// row; a row of another source is never read as this one's.
type Progress struct {
	Table string // the table's canonical name
	Slot  string
	// Source is "<system identifier>/<database>" once the session
	// identified its server (Keyed); "" keys the row by the slot name
	// alone, as rows were written before.
	Source   string
	tookOver bool // a row keyed by the slot alone was read as this source's
}

// Keyed keys the row to the server a session reached.
func (p *Progress) Keyed(systemID, database string) {
	p.Source = systemID + "/" + database
}

// Key is the row's value in the slot column.
func (p *Progress) Key() string {
	if p.Source == "" {
		return p.Slot
	}
	return p.Source + "/" + p.Slot
}

// line is the upsert of the slot's row at lsn (an insert into a table
// with a primary key replaces the row).
func (p *Progress) line(lsn pglogrepl.LSN) []byte {
	slot, _ := json.Marshal(p.Key())
	b := append([]byte(`{"insert":{"slot":`), slot...)
	b = append(b, `,"lsn":`...)
	b = strconv.AppendUint(b, uint64(lsn), 10)
	return append(b, "}}\n"...)
}

// postProgress sends the slot's row at lsn, after the rows it covers.
func (s *Sender) postProgress(ctx context.Context, lsn pglogrepl.LSN) (*Token, error) {
	p := s.Progress
	tok, err := s.Fence.Ingress(ctx, s.Sink, p.Table, p.line(lsn), 1)
	if err != nil {
		s.Observer.FelderaError(feldera.ErrorCode(err))
		return nil, fmt.Errorf("push the progress row of slot %s (%s) to %s: %w", p.Slot, lsn, p.Table, err)
	}
	s.Txns.Posted(p.Table)
	return &Token{Table: p.Table, Token: tok}, nil
}

// PutProgress writes the slot's row at lsn on its own and waits until it
// is complete, raising the step watermark: the start clears the row (lsn
// 0) before it creates a slot and when the server changed
// (connector/startprogress.go).
func (s *Sender) PutProgress(ctx context.Context, lsn pglogrepl.LSN) error {
	if err := s.WaitFence(ctx); err != nil {
		return err
	}
	if err := s.Txns.Release(ctx); err != nil {
		return err
	}
	tok, err := s.postProgress(ctx, lsn)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, s.CompletionTimeout)
	defer cancel()
	step, err := s.Sink.WaitCompleteStep(wctx, tok.Token)
	if err != nil {
		if wctx.Err() != nil && ctx.Err() == nil {
			return fmt.Errorf("%w: the progress row of slot %s not complete after %s (FELDERA_COMPLETION_TIMEOUT)", ErrFelderaUnavailable, s.Progress.Slot, s.CompletionTimeout)
		}
		return fmt.Errorf("wait for completion of the progress row: %w", err)
	}
	if err := CheckStep(step, s.NeedStep(), func() string { return "the progress row of slot " + s.Progress.Slot }); err != nil {
		return err
	}
	Raise(&s.step, step)
	return s.Txns.RowCommitted(lsn)
}

// ReadProgress reads the source's row through the fenced ad-hoc query:
// the end LSN of the last source transaction Feldera holds from it, and
// whether there is a row. The table holds a row per source, so all of it
// is read, and this source's picked here (Progress.Key). With none, a row
// keyed by the slot name alone, which a deployment wrote before rows
// were keyed by their source, is taken over: the first row committed
// under the source's key supersedes it.
func (s *Sender) ReadProgress(ctx context.Context) (pglogrepl.LSN, bool, error) {
	p := s.Progress
	rows, err := s.progressRows(ctx)
	if err != nil {
		return 0, false, fmt.Errorf("read the progress row of %s from %s: %w", p.Key(), p.Table, err)
	}
	if lsn, ok := rows[p.Key()]; ok {
		return lsn, true, nil
	}
	lsn, ok := rows[p.Slot]
	if !ok || p.Source == "" {
		return 0, false, nil
	}
	if !p.tookOver {
		p.tookOver = true
		s.Logger.Info("progress: taking over the progress row keyed by the slot name alone; the next row is written under the source's key", "slot", p.Slot, "key", p.Key(), "progress_lsn", lsn)
	}
	return lsn, true, nil
}

// progressRows reads every row of the progress table, by key.
func (s *Sender) progressRows(ctx context.Context) (map[string]pglogrepl.LSN, error) {
	p := s.Progress
	rows := map[string]pglogrepl.LSN{}
	err := s.Query(ctx, "SELECT slot, lsn FROM "+feldera.SQLIdent(p.Table), func(row json.RawMessage) error {
		var r struct {
			Slot string       `json:"slot"`
			LSN  *json.Number `json:"lsn"`
		}
		if err := json.Unmarshal(row, &r); err != nil || r.LSN == nil {
			return fmt.Errorf("unexpected row %s", row)
		}
		if r.Slot != p.Key() && r.Slot != p.Slot {
			return nil // another source's
		}
		n, err := strconv.ParseUint(r.LSN.String(), 10, 64)
		if err != nil {
			return fmt.Errorf("lsn %s of %s: %w", r.LSN, r.Slot, err)
		}
		rows[r.Slot] = pglogrepl.LSN(n)
		return nil
	})
	return rows, err
}
