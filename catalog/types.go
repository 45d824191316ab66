package catalog

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfeldera/pgfeldera/decode/pgvalue"
	"github.com/pgfeldera/pgfeldera/replconn"
)

// Types is pg_type for the types the decoder's built-in table does
// not know: enums, domains, ranges, multiranges, extension types and
// arrays of them. It is read at each session's start; a type first seen
// later (CREATE TYPE, then ALTER TABLE ADD COLUMN while streaming) is
// looked up on its own connection.
type Types struct {
	mu  sync.Mutex
	m   map[uint32]pgvalue.PGType
	dsn string
}

const typeQuery = `SELECT t.oid, format_type(t.oid, NULL), t.typname, t.typtype, t.typcategory,
	t.typbasetype, t.typtypmod, t.typelem FROM pg_type t `

// LoadTypes reads every non-composite type outside the built-in range and
// the built-in domains, ranges and multiranges; composite row types (one
// per table) and their arrays are left to a lookup by OID.
func LoadTypes(ctx context.Context, conn *pgx.Conn, dsn string) (*Types, error) {
	cat := &Types{m: map[uint32]pgvalue.PGType{}, dsn: dsn}
	rows, err := conn.Query(ctx, typeQuery+`WHERE t.typtype <> 'c' AND (t.oid >= 16384 OR t.typtype IN ('d','e','r','m'))
		AND NOT (t.typcategory = 'A' AND EXISTS (SELECT 1 FROM pg_type e WHERE e.oid = t.typelem AND e.typtype = 'c'))`)
	if err != nil {
		return nil, fmt.Errorf("read pg_type: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		t, err := scanType(rows)
		if err != nil {
			return nil, fmt.Errorf("read pg_type: %w", err)
		}
		cat.m[t.OID] = t
	}
	return cat, rows.Err()
}

func scanType(row pgx.Row) (pgvalue.PGType, error) {
	var t pgvalue.PGType
	var kind, cat string
	err := row.Scan(&t.OID, &t.Name, &t.TypName, &kind, &cat, &t.Base, &t.BaseMod, &t.Elem)
	if err == nil && len(kind) == 1 && len(cat) == 1 {
		t.Kind, t.Category = kind[0], cat[0]
	}
	return t, err
}

// Lookup is a pgvalue.Types. A miss is read from Postgres (5 s at most) and
// remembered, found or not.
func (c *Types) Lookup(oid uint32) (pgvalue.PGType, bool) {
	c.mu.Lock()
	t, ok := c.m[oid]
	c.mu.Unlock()
	if ok {
		return t, t.Name != ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := replconn.Connect(ctx, c.dsn)
	if err != nil {
		return pgvalue.PGType{}, false
	}
	defer conn.Close(context.Background())
	t, err = scanType(conn.QueryRow(ctx, typeQuery+"WHERE t.oid = $1", oid))
	if err != nil {
		return pgvalue.PGType{}, false // not remembered: the connection may have failed
	}
	c.mu.Lock()
	c.m[oid] = t
	c.mu.Unlock()
	return t, true
}
