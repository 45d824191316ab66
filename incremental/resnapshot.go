package incremental

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/pgfeldera/pgfeldera/internal/fatal"
	"github.com/pgfeldera/pgfeldera/state"
)

// Resnapshotting one table while streaming (`pgfeldera resnapshot`).
// The request is a logical message in the stream (prefix
// pgfeldera, with the slot, an id and the tables), so it is ordered with
// the data and needs no other channel to the running connector. At the
// message the loop marks the tables incremental from their beginning,
// with Retract set, saves the state (a replay of the same id is then
// ignored) and queues them for the worker, which
//
//  1. retracts: it lists the keys Feldera holds for the table (spooled to
//     a file beside the state file, so memory stays bounded) and checks
//     them against Postgres in batches of SNAPSHOT_CHUNK_ROWS, each batch
//     in its own REPEATABLE READ transaction between a low and a high
//     watermark, exactly as a chunk is read. At the high watermark the
//     loop deletes the keys the batch's snapshot lacks and the stream did
//     not change between the watermarks (a key it changed holds the
//     stream's value, which is newer), under the same xip rule as a
//     chunk. The argument is a chunk's (snapshot/chunk.go): a key absent
//     at the snapshot and untouched until H is absent at H, so its delete
//     at H is exact; a delete of a key Feldera no longer holds (the
//     stream deleted it after the listing) is ignored by a keyed table.
//  2. reads the chunks, as an incremental snapshot does: rows Postgres has
//     are upserted at their chunk's high watermark.
//
// A key Feldera holds and Postgres lacks is deleted by 1; one Postgres
// holds is written by 2; the stream keeps both right meanwhile. The
// request is done (state.Request.Done, which `resnapshot --wait` waits
// for) once every table's last chunk is acknowledged.

// ResnapshotMessage is the logical message content of a resnapshot
// request of tables (schema.table, as the state file names them) for the
// connector streaming from slot.
func ResnapshotMessage(slot, id string, tables []string) (prefix, content string) {
	b, _ := json.Marshal(Watermark{Slot: slot, Resnapshot: id, Tables: tables})
	return WatermarkPrefix, string(b)
}

// request is a resnapshot request at lsn, read from the stream.
func (inc *Session) request(w Watermark, lsn pglogrepl.LSN) error {
	st := inc.rec.St
	if st.Request(w.Resnapshot) != nil {
		inc.cfg.Logger.Debug("resnapshot: request already taken (a replay)", "id", w.Resnapshot, "lsn", lsn)
		return nil
	}
	r := state.Request{ID: w.Resnapshot, Tables: w.Tables}
	save := func() error {
		if err := state.Save(inc.cfg.StateFile, st); err != nil {
			return fatal.Wrap(err)
		}
		return nil
	}
	refuse := func(why string) error {
		r.Refused = why
		st.AddRequest(r)
		inc.cfg.Logger.Error("resnapshot: request refused", "id", r.ID, "tables", strings.Join(r.Tables, ","), "lsn", lsn, "why", why)
		return save()
	}
	if inc.cfg.Never {
		return refuse("SNAPSHOT_MODE=never: this connector copies no table")
	}
	if len(w.Tables) == 0 {
		return refuse("the request names no table")
	}
	idx, why := inc.requested(w.Tables)
	if why != "" {
		return refuse(why)
	}
	busy := ""
	for _, i := range idx {
		if inc.table(i) != nil {
			busy = st.Tables[i].Source
		}
		t := &st.Tables[i]
		*t = state.Table{Source: t.Source, Dest: t.Dest, Status: state.Incremental, Retract: true, Request: r.ID, Fingerprint: t.Fingerprint, Columns: t.Columns, Partitions: t.Partitions}
	}
	st.AddRequest(r)
	if err := save(); err != nil {
		return err
	}
	inc.cfg.Logger.Info("resnapshot: request received; retracting and reading the tables again in chunks while streaming",
		"id", r.ID, "tables", strings.Join(r.Tables, ","), "lsn", lsn)
	if busy != "" {
		return fmt.Errorf("resnapshot request %s names %s, whose incremental snapshot is under way: the session restarts to read it again from its beginning", r.ID, busy)
	}
	for _, i := range idx {
		inc.add(i)
	}
	inc.startWorker()
	return nil
}

// requested is the indexes in TABLES of the tables a resnapshot request
// names, each once; why says why the request is refused instead.
func (inc *Session) requested(names []string) (idx []int, why string) {
	st := inc.rec.St
	for _, name := range names {
		i := slices.IndexFunc(st.Tables, func(t state.Table) bool { return t.Source == name })
		if i < 0 {
			var known []string
			for _, t := range st.Tables {
				known = append(known, t.Source)
			}
			return nil, fmt.Sprintf("table %s is not one this connector streams (%s)", name, strings.Join(known, ", "))
		}
		if err := inc.keys[i].Err; err != nil {
			return nil, err.Error()
		}
		if !slices.Contains(idx, i) {
			idx = append(idx, i)
		}
	}
	return idx, ""
}
