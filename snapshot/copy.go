package snapshot

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Created is a new slot: its consistent point and, when exported, the
// snapshot name under which COPY sees exactly what precedes that point.
type Created struct {
	ConsistentPoint pglogrepl.LSN
	SnapshotName    string
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// CreateSlot creates a pgoutput logical slot on a replication connection.
// The SNAPSHOT option is always written: 'export' keeps a snapshot alive
// until the next command on this connection (so keep it open and idle until
// every COPY has finished); 'nothing' pins no xmin.
//
// With failover the slot is created with FAILOVER (PostgreSQL 17+) in the
// same command: a second command on the connection would destroy the
// exported snapshot.
func CreateSlot(ctx context.Context, conn *pgconn.PgConn, slot string, export, failover bool) (Created, error) {
	action := "nothing"
	if export {
		action = "export"
	}
	opts := fmt.Sprintf("SNAPSHOT '%s'", action)
	if failover {
		opts += ", FAILOVER true"
	}
	res, err := conn.Exec(ctx, fmt.Sprintf("CREATE_REPLICATION_SLOT %s LOGICAL pgoutput (%s)", quoteIdent(slot), opts)).ReadAll()
	if err != nil {
		return Created{}, fmt.Errorf("create slot %s: %w", slot, err)
	}
	if len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) < 3 {
		return Created{}, fmt.Errorf("create slot %s: unexpected answer", slot)
	}
	row := res[0].Rows[0]
	lsn, err := pglogrepl.ParseLSN(string(row[1]))
	if err != nil {
		return Created{}, fmt.Errorf("create slot %s: consistent point: %w", slot, err)
	}
	return Created{ConsistentPoint: lsn, SnapshotName: string(row[2])}, nil
}

// DropSlot drops a slot, waiting for it to become inactive.
func DropSlot(ctx context.Context, conn *pgconn.PgConn, slot string) error {
	if _, err := conn.Exec(ctx, fmt.Sprintf("DROP_REPLICATION_SLOT %s WAIT", quoteIdent(slot))).ReadAll(); err != nil {
		return fmt.Errorf("drop slot %s: %w", slot, err)
	}
	return nil
}

// Begin opens the read-only REPEATABLE READ transaction that imports the
// exported snapshot (when name is not empty) and pins the output settings.
func Begin(ctx context.Context, conn *pgx.Conn, snapshotName string, settings []string) error {
	if _, err := conn.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"); err != nil {
		return fmt.Errorf("begin snapshot transaction: %w", err)
	}
	if snapshotName != "" {
		if _, err := conn.Exec(ctx, "SET TRANSACTION SNAPSHOT '"+strings.ReplaceAll(snapshotName, "'", "''")+"'"); err != nil {
			return fmt.Errorf("import snapshot %s: %w", snapshotName, err)
		}
	}
	for _, q := range settings {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// Source is what a snapshot reads: a table, and how.
type Source struct {
	Table  string // the quoted "schema"."name"
	Filter string // a publication row filter (SQL), "" for none
	// Query reads through COPY (SELECT …) TO STDOUT, which a partitioned
	// table, a row filter and a generated column need: COPY of a
	// partitioned table fails, COPY cannot filter, and COPY refuses a
	// generated column in its column list before PG 18.
	Query bool
}

// SQL is the COPY statement that reads cols from s.
func (s Source) SQL(cols []string) string {
	quoted := make([]string, len(cols))
	for i, c := range cols {
		quoted[i] = quoteIdent(c)
	}
	if !s.Query && s.Filter == "" {
		return fmt.Sprintf("COPY %s (%s) TO STDOUT", s.Table, strings.Join(quoted, ", "))
	}
	sel := fmt.Sprintf("SELECT %s FROM %s", strings.Join(quoted, ", "), s.Table)
	if s.Filter != "" {
		sel += " WHERE " + s.Filter
	}
	return "COPY (" + sel + ") TO STDOUT"
}

// Copy runs s's COPY of cols TO STDOUT in text format and calls fn with
// each line, without its newline. It returns the number of lines.
func Copy(ctx context.Context, conn *pgx.Conn, s Source, cols []string, fn func(line []byte) error) (int64, error) {
	return CopySQL(ctx, conn, s.Table, s.SQL(cols), fn)
}

// CopySQL runs one COPY … TO STDOUT statement (a chunk's, from ChunkSQL)
// and calls fn with each line; errors name qualified.
func CopySQL(ctx context.Context, conn *pgx.Conn, qualified, sql string, fn func(line []byte) error) (int64, error) {
	w := &lineWriter{fn: fn}
	if _, err := conn.PgConn().CopyTo(ctx, w, sql); err != nil {
		if w.err != nil {
			return w.n, w.err
		}
		return w.n, fmt.Errorf("copy %s: %w", qualified, err)
	}
	if len(w.partial) > 0 {
		return w.n, fmt.Errorf("copy %s: unterminated last line", qualified)
	}
	return w.n, w.err
}

// lineWriter splits COPY data into lines; Postgres sends one row per
// CopyData message, but nothing depends on it.
type lineWriter struct {
	fn      func([]byte) error
	partial []byte
	n       int64
	err     error
}

func (w *lineWriter) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	data := p
	if len(w.partial) > 0 {
		w.partial = append(w.partial, p...)
		data = w.partial
	}
	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			break
		}
		if err := w.fn(data[:i]); err != nil {
			w.err = err
			return 0, err
		}
		w.n++
		data = data[i+1:]
	}
	w.partial = append(w.partial[:0], data...)
	return len(p), nil
}
