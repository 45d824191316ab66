package catalog

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// KeyColumn is a column of a primary key, with its type as format_type
// prints it (a cast target for key-range queries).
type KeyColumn struct {
	Name string
	Type string
}

// Key is a table's key for reading it in chunks: its primary key's
// columns and their positions in the relation, or why it cannot be read
// in chunks (incremental.ChunkKey).
type Key struct {
	Cols []KeyColumn
	At   []int
	Err  error
}

// PrimaryKey returns the primary key of source (schema.table, quoted as
// needed) in key order; none when it has no primary key.
func PrimaryKey(ctx context.Context, conn *pgx.Conn, source string) ([]KeyColumn, error) {
	rows, err := conn.Query(ctx, `SELECT a.attname, format_type(a.atttypid, a.atttypmod)
		FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
		WHERE i.indrelid = $1::regclass AND i.indisprimary
		ORDER BY array_position(i.indkey::int2[], a.attnum)`, source)
	if err != nil {
		return nil, fmt.Errorf("read primary key of %s: %w", source, err)
	}
	key, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (KeyColumn, error) {
		var k KeyColumn
		err := row.Scan(&k.Name, &k.Type)
		return k, err
	})
	if err != nil {
		return nil, fmt.Errorf("read primary key of %s: %w", source, err)
	}
	return key, nil
}
