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
type Progress struct {
	Table string // the table's canonical name
	Slot  string
}

// line is the upsert of the slot's row at lsn (an insert into a table
// with a primary key replaces the row).
func (p *Progress) line(lsn pglogrepl.LSN) []byte {
	slot, _ := json.Marshal(p.Slot)
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

// ReadProgress reads the slot's row through the fenced ad-hoc query: the
// end LSN of the last source transaction Feldera holds from the slot, and
// whether there is a row. The table holds a row per slot, so all of it is
// read, and the slot's picked here.
func (s *Sender) ReadProgress(ctx context.Context) (pglogrepl.LSN, bool, error) {
	p := s.Progress
	var lsn pglogrepl.LSN
	found := false
	err := s.Query(ctx, "SELECT slot, lsn FROM "+feldera.SQLIdent(p.Table), func(row json.RawMessage) error {
		var r struct {
			Slot string       `json:"slot"`
			LSN  *json.Number `json:"lsn"`
		}
		if err := json.Unmarshal(row, &r); err != nil || r.LSN == nil {
			return fmt.Errorf("unexpected row %s", row)
		}
		if r.Slot != p.Slot {
			return nil
		}
		n, err := strconv.ParseUint(r.LSN.String(), 10, 64)
		if err != nil {
			return fmt.Errorf("lsn %s: %w", r.LSN, err)
		}
		lsn, found = pglogrepl.LSN(n), true
		return nil
	})
	if err != nil {
		return 0, false, fmt.Errorf("read the progress row of slot %s from %s: %w", p.Slot, p.Table, err)
	}
	return lsn, found, nil
}
