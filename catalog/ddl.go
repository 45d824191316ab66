package catalog

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgfeldera/pgfeldera/decode/pgvalue"
	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/replconn"
)

// DDL writes Feldera CREATE TABLE statements for tables from the Postgres
// catalog: one per Feldera table (leaf partitions sharing one are read from
// the first), with the columns the publication sends (its column list, and
// generated columns where the stream carries them). Each column's Feldera
// type is proposed by pgvalue.Suggest and then put through pgvalue.Plan, the
// check startup makes, so what is printed is what the connector accepts.
// Columns the decoder refuses are printed as comments saying why, and
// returned as notes; the table is still usable without them.
func DDL(ctx context.Context, dsn, publication string, tables []Table) (ddl string, notes []string, err error) {
	conn, err := replconn.Connect(ctx, dsn)
	if err != nil {
		return "", nil, fmt.Errorf("connect to postgres: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)", publication).Scan(&exists); err != nil {
		return "", nil, fmt.Errorf("read publication: %w", err)
	}
	if !exists {
		return "", nil, refused(fmt.Errorf("publication %q does not exist (CREATE PUBLICATION %s FOR TABLE ...): the columns it sends decide the Feldera schema", publication, pgvalue.QuoteIdent(publication)))
	}
	types, err := LoadTypes(ctx, conn, dsn)
	if err != nil {
		return "", nil, err
	}
	var b strings.Builder
	done := map[string]bool{}
	for _, t := range tables {
		if done[t.Dest] {
			continue
		}
		done[t.Dest] = true
		tn, err := ddlTable(ctx, conn, types, publication, t, &b)
		if err != nil {
			return "", nil, err
		}
		notes = append(notes, tn...)
	}
	return b.String(), notes, nil
}

// ddlTable writes one table's CREATE TABLE to b and returns its notes, so
// DDL stays a loop over the Feldera tables.
func ddlTable(ctx context.Context, conn *pgx.Conn, types *Types, publication string, t Table, b *strings.Builder) (notes []string, err error) {
	si, err := ReadSource(ctx, conn, t, publication)
	if err != nil {
		return nil, err
	}
	if len(si.Cols) == 0 {
		return nil, refused(fmt.Errorf("table %s: the publication sends no columns of it", t.Schema+"."+t.Name))
	}
	extra, err := ddlColumns(ctx, conn, t)
	if err != nil {
		return nil, err
	}
	lines, notes := ddlColumnLines(si.Cols, extra, types, t)
	pk, err := PrimaryKey(ctx, conn, t.Source())
	if err != nil {
		return nil, err
	}
	var key []string
	for _, k := range pk {
		key = append(key, ddlIdent(k.Name))
	}
	fmt.Fprintf(b, "-- from %s (publication %s)\n", t.Source(), publication)
	fmt.Fprintf(b, "CREATE TABLE %s (\n", ddlIdent(t.Dest))
	b.WriteString(joinColumns(lines, key))
	b.WriteString("\n)")
	if len(key) == 0 {
		// No key: retraction (TRUNCATE, resnapshot) and verify read the
		// table's rows back, which Feldera serves only from a
		// materialized table.
		b.WriteString(" WITH ('materialized' = 'true')")
		note := fmt.Sprintf("table %s has no PRIMARY KEY: Feldera table %s is keyless, which pgfeldera keeps exact only with the progress table (pgfeldera_progress, below), and otherwise refuses unless FELDERA_REQUIRE_PRIMARY_KEY=false", t.Schema+"."+t.Name, t.Dest)
		if si.Ident != 'f' {
			note += fmt.Sprintf("; an UPDATE then retracts the old row by its whole value, so the table needs ALTER TABLE %s REPLICA IDENTITY FULL", t.Source())
		}
		notes = append(notes, note)
	}
	b.WriteString(";\n\n")
	return notes, nil
}

// ddlColumnLines maps each sent column to its Feldera column line, or to a
// comment and a note when the decoder refuses it, so one column does not
// cost the table.
func ddlColumnLines(cols []Column, extra map[string]ddlColumn, types *Types, t Table) (lines, notes []string) {
	for _, c := range cols {
		x := extra[c.Name]
		ct, err := pgvalue.Suggest(c.TypeOID, c.Typmod, x.dims, types.Lookup)
		if err == nil {
			ct.Nullable = !x.notNull
			_, err = pgvalue.Plan(c.TypeOID, c.Typmod, ct, types.Lookup)
		}
		if err != nil {
			note := fmt.Sprintf("table %s column %s (%s, OID %d): %v", t.Schema+"."+t.Name, c.Name, typeName(types, c.TypeOID), c.TypeOID, err)
			notes = append(notes, note)
			lines = append(lines, "  -- "+ddlIdent(c.Name)+": not mapped: "+strings.ReplaceAll(err.Error(), "\n", " "))
			continue
		}
		if c.TypeOID == pgvalue.OIDNumeric && c.Typmod < 0 {
			lines = append(lines, fmt.Sprintf("  -- %s: numeric without precision; each value is checked against DECIMAL(%d, %d) and one that does not fit stops the connector: narrow it to your data", ddlIdent(c.Name), pgvalue.UnconstrainedDecimal[0], pgvalue.UnconstrainedDecimal[1]))
		}
		line := "  " + ddlIdent(c.Name) + " " + ddlType(ct)
		if x.notNull {
			line += " NOT NULL"
		}
		lines = append(lines, line)
	}
	return lines, notes
}

// joinColumns joins column lines and the PRIMARY KEY clause with commas,
// keeping comment lines (refused columns) out of the comma chain.
func joinColumns(lines, key []string) string {
	items := append([]string(nil), lines...)
	if len(key) > 0 {
		items = append(items, "  PRIMARY KEY ("+strings.Join(key, ", ")+")")
	}
	last := -1
	for i, l := range items {
		if !strings.HasPrefix(l, "  --") {
			last = i
		}
	}
	for i, l := range items {
		if i < last && !strings.HasPrefix(l, "  --") {
			items[i] = l + ","
		}
	}
	return strings.Join(items, "\n")
}

type ddlColumn struct {
	notNull bool
	dims    int
}

func ddlColumns(ctx context.Context, conn *pgx.Conn, t Table) (map[string]ddlColumn, error) {
	rows, err := conn.Query(ctx, `SELECT a.attname, a.attnotnull, a.attndims
		FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped`, t.Schema, t.Name)
	if err != nil {
		return nil, fmt.Errorf("read columns of %s: %w", t.Schema+"."+t.Name, err)
	}
	defer rows.Close()
	out := map[string]ddlColumn{}
	for rows.Next() {
		var name string
		var c ddlColumn
		if err := rows.Scan(&name, &c.notNull, &c.dims); err != nil {
			return nil, err
		}
		out[name] = c
	}
	return out, rows.Err()
}

var plainIdent = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// sqlReserved are words Feldera's SQL dialect (Calcite) reserves that are
// common as column names; they are quoted.
var sqlReserved = map[string]bool{
	"all": true, "and": true, "array": true, "as": true, "between": true, "by": true, "case": true, "cast": true,
	"check": true, "column": true, "constraint": true, "create": true, "cross": true, "current": true,
	"date": true, "day": true, "default": true, "delete": true, "desc": true, "distinct": true, "end": true,
	"except": true, "exists": true, "false": true, "from": true, "full": true, "group": true, "having": true,
	"hour": true, "in": true, "inner": true, "insert": true, "interval": true, "into": true, "is": true,
	"join": true, "key": true, "left": true, "like": true, "limit": true, "minute": true, "month": true,
	"natural": true, "not": true, "null": true, "of": true, "on": true, "or": true, "order": true,
	"outer": true, "primary": true, "references": true, "right": true, "row": true, "rows": true,
	"second": true, "select": true, "table": true, "then": true, "time": true, "timestamp": true, "to": true,
	"true": true, "union": true, "unique": true, "update": true, "user": true, "using": true, "value": true,
	"values": true, "when": true, "where": true, "window": true, "with": true, "year": true,
}

// ddlIdent writes a canonical name as Feldera reads it back to the same
// canonical name: plain lower-case names bare, others quoted (which keeps
// their case).
func ddlIdent(name string) string {
	if plainIdent.MatchString(name) && !sqlReserved[name] {
		return name
	}
	return feldera.SQLIdent(name)
}

func ddlType(ct feldera.ColumnType) string {
	switch ct.Type {
	case "ARRAY":
		return ddlType(*ct.Component) + " ARRAY"
	case "DECIMAL":
		return fmt.Sprintf("DECIMAL(%d, %d)", *ct.Precision, *ct.Scale)
	}
	return ct.Type
}

func typeName(types *Types, oid uint32) string {
	if n := pgvalue.TypeName(oid); n != "" {
		return n
	}
	if t, ok := types.Lookup(oid); ok {
		return t.Name
	}
	return "unknown"
}
