package snapshot

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/pgfeldera/pgfeldera/decode/pgvalue"
)

// Begin opens the read-only REPEATABLE READ transaction that imports the
// exported snapshot (when name is not empty) and pins the output settings.
func Begin(ctx context.Context, conn *pgx.Conn, snapshotName string, settings []string) error {
	if _, err := conn.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"); err != nil {
		return fmt.Errorf("begin snapshot transaction: %w", err)
	}
	if snapshotName != "" {
		if _, err := conn.Exec(ctx, "SET TRANSACTION SNAPSHOT "+pgvalue.QuoteLiteral(snapshotName)); err != nil {
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
		quoted[i] = pgvalue.QuoteIdent(c)
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
