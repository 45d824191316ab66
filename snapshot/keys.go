package snapshot

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgfeldera/pgfeldera/decode"
	"github.com/pgfeldera/pgfeldera/decode/pgvalue"
	"github.com/pgfeldera/pgfeldera/feldera"
)

func SelectList(fields []string) string {
	q := make([]string, len(fields))
	for i, f := range fields {
		q[i] = feldera.SQLIdent(f)
	}
	return strings.Join(q, ", ")
}

// AbsentCheck is the query that finds which of a batch of Feldera keys
// none of rels (the sources of one Feldera table) has: its parameters
// are one text array per key column (rels[0].KeyCols order), and it
// returns each absent key's ordinal (from 1), and with withKeys also the
// key columns, cast to their types, for the caller to read as Postgres
// prints them.
func AbsentCheck(ctx context.Context, conn *pgx.Conn, rels []*decode.Rel, withKeys bool) (string, error) {
	rel := rels[0]
	// SELECT k.i FROM unnest($1::text[], …) WITH ORDINALITY AS k(c0, …, i)
	// WHERE NOT EXISTS (SELECT 1 FROM t WHERE t.a = k.c0::type AND …)
	var args, names, conds, out []string
	out = append(out, "k.i")
	for i, ci := range rel.KeyCols {
		// The type with its modifier: a bare character is character(1),
		// and a cast to it would cut every key of a char(3) column to one
		// character (likewise bit).
		var typ string
		if err := conn.QueryRow(ctx, "SELECT format_type($1::oid, $2::int)", rel.Cols[ci].TypeOID, rel.Cols[ci].TypeMod).Scan(&typ); err != nil {
			return "", fmt.Errorf("type of key column %s of %s (OID %d): %w", rel.Cols[ci].Name, rel.Target.Qualified(), rel.Cols[ci].TypeOID, err)
		}
		args = append(args, fmt.Sprintf("$%d::text[]", i+1))
		names = append(names, fmt.Sprintf("c%d", i))
		conds = append(conds, fmt.Sprintf("t.%s = k.c%d::%s", pgvalue.QuoteIdent(rel.Cols[ci].Name), i, typ))
		out = append(out, fmt.Sprintf("k.c%d::%s", i, typ))
	}
	if !withKeys {
		out = out[:1]
	}
	var absent []string
	for _, r := range rels {
		where := conds
		// A row the publication's filter excludes is not in the snapshot
		// either: the stream will never maintain it, so Feldera must not
		// hold it. (The filter's columns resolve to t, the innermost scope.)
		if r.Target.Filter != "" {
			where = append(where[:len(where):len(where)], "("+r.Target.Filter+")")
		}
		absent = append(absent, fmt.Sprintf("NOT EXISTS (SELECT 1 FROM %s t WHERE %s)", r.Target.Source(), strings.Join(where, " AND ")))
	}
	return fmt.Sprintf("SELECT %s FROM unnest(%s) WITH ORDINALITY AS k(%s, i) WHERE %s",
		strings.Join(out, ", "), strings.Join(args, ", "), strings.Join(names, ", "), strings.Join(absent, " AND ")), nil
}

// KeyVals appends a Feldera query row's key fields, as text Postgres can
// cast, to vals (one slice per key column), and returns the row as ingress
// takes it (a delete's record).
func KeyVals(dest feldera.Relation, row json.RawMessage, vals [][]string) (json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(row, &m); err != nil {
		return nil, fmt.Errorf("feldera query row %s: %w", row, err)
	}
	for i, k := range dest.PrimaryKey {
		v, ok := lookupField(m, k)
		if !ok {
			return nil, fmt.Errorf("feldera query row %s lacks key field %s", row, k)
		}
		f, _ := dest.Field(k)
		s, err := feldera.QueryText(f.ColumnType, v)
		if err != nil {
			return nil, fmt.Errorf("key field %s of %s: %w", k, dest.Name, err)
		}
		vals[i] = append(vals[i], s)
	}
	return dest.IngressRow(row)
}

// lookupField finds a key in a query row: exact, else case-insensitive
// (result column names of unquoted identifiers are lower case).
func lookupField(m map[string]json.RawMessage, name string) (json.RawMessage, bool) {
	if v, ok := m[name]; ok {
		return v, true
	}
	for k, v := range m {
		if strings.EqualFold(k, name) {
			return v, true
		}
	}
	return nil, false
}
