package felderatest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest/internal/sqlvalue"
	"github.com/pgfeldera/pgfeldera/feldera/felderatest/internal/table"
)

// RequestCount is how many ingress requests the log holds.
func (s *Server) RequestCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.requests)
}

// Requests returns the ingress request log.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// MissedDeletes counts deletes of rows a keyless table did not hold
// (undefined behaviour in Feldera).
func (s *Server) MissedDeletes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.missedDeletes
}

// Rows returns the applied rows of a table (canonical name), sorted by key.
func (s *Server) Rows(tableName string) []Row {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.c.Advance(time.Now())
	t, ok := s.tables[feldera.TableIdent(tableName)]
	if !ok {
		return nil
	}
	return table.Snapshot[Row](t)
}

// InsertsByKey counts, per key of a keyed table, the insert commands
// ingress received (including replays). Keys are rendered as their JSON
// values joined by ",": {"id":7} → "7".
func (s *Server) InsertsByKey(tableName string) map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for k, v := range s.keyInserts[feldera.TableIdent(tableName)] {
		out[k] = v
	}
	return out
}

// CountedRows is, in CountOnly mode, the number of lines pushed to a table.
func (s *Server) CountedRows(tableName string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.countOnly[feldera.TableIdent(tableName)]
}

// Put applies an insert (upsert) of a row given as a JSON object directly to
// a table's state, bypassing ingress: for planting differences in tests.
func (s *Server) Put(tableName string, rowJSON string) error {
	return s.direct(tableName, rowJSON, 'i')
}

// Delete removes a row (by key on a keyed table) directly from the state.
func (s *Server) Delete(tableName string, rowJSON string) error {
	return s.direct(tableName, rowJSON, 'd')
}

func (s *Server) direct(tableName, rowJSON string, kind byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tables[feldera.TableIdent(tableName)]
	if !ok {
		return fmt.Errorf("felderatest: no table %s", tableName)
	}
	vals, set, err := t.ParseRecord(json.RawMessage(rowJSON), kind)
	if err != nil {
		return err
	}
	t.Apply(table.Op{Kind: kind, Row: vals, Set: set})
	return nil
}

// Row is one row as the double holds it: canonical field name → canonical
// JSON value.
type Row map[string]json.RawMessage

// String renders the row as JSON with sorted keys.
func (r Row) String() string {
	keys := make([]string, 0, len(r))
	for k := range r {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(sqlvalue.MustJSON(k))
		b.WriteByte(':')
		b.Write(r[k])
	}
	b.WriteByte('}')
	return b.String()
}

// View reads the tables inside a Config.OnState hook.
type View struct{ s *Server }

// Rows is the table's current rows (see Server.Rows).
func (v View) Rows(tableName string) []Row {
	t, ok := v.s.tables[feldera.TableIdent(tableName)]
	if !ok {
		return nil
	}
	return table.Snapshot[Row](t)
}

// Len is how many rows the table holds now.
func (s *Server) Len(tableName string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.c.Advance(time.Now())
	return View{s}.Len(tableName)
}

// Len is how many rows the table holds.
func (v View) Len(tableName string) int {
	t, ok := v.s.tables[feldera.TableIdent(tableName)]
	if !ok {
		return 0
	}
	return t.Len()
}

// SumInt adds up an integer column over the table's rows (NULL counts 0):
// cheap enough to check an invariant at every state.
func (v View) SumInt(tableName, column string) (int64, error) {
	t, ok := v.s.tables[feldera.TableIdent(tableName)]
	if !ok {
		return 0, fmt.Errorf("felderatest: no table %s", tableName)
	}
	return t.SumInt(tableName, column)
}

// PeakQueued is the most ingress requests that had records queued, not
// yet fed to a step, at once: more than one means a client kept several
// batches in flight.
func (s *Server) PeakQueued() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.c.PeakQueued
}

// PeakQueuedRecords is the most records that were queued, not yet fed to
// a step, at once (Feldera buffers at most 100,000 per ingress endpoint
// before it stops reading a POST).
func (s *Server) PeakQueuedRecords() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.c.PeakRows
}

// PushedBack counts the ingress requests that found their endpoint's
// buffer full (Config.MaxQueuedRecords) and stopped being read until a
// step drained it: Feldera's backpressure, which a request meets only when
// more is in flight than Feldera buffers.
func (s *Server) PushedBack() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pushedBack
}

// OrderViolations counts inserts applied with a smaller Config.OrderColumn
// value than an earlier one for the same key.
func (s *Server) OrderViolations() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.orderViolations
}

// PendingPolls is how many completion polls were answered "inprogress": a
// client that waits for a held token polls again and again.
func (s *Server) PendingPolls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending
}
