package catalog

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Column is a Postgres column as the catalog describes it.
type Column struct {
	Name    string
	TypeOID uint32
	Typmod  int32
	InKey   bool // in the replica identity
}

// CheckShared allows several sources for one Feldera table only when they
// are partitions of one partitioned table (published without
// publish_via_partition_root, so each leaf streams under its own name):
// they then have the same columns, and a row is in exactly one of them, so
// their union is the root's rows. Anything else would merge unrelated rows.
func CheckShared(ctx context.Context, conn *pgx.Conn, tables []Table, groups [][]int) error {
	for _, g := range groups {
		if len(g) < 2 {
			continue
		}
		var names []string
		for _, i := range g {
			names = append(names, tables[i].Schema+"."+tables[i].Name)
		}
		roots := map[string]bool{}
		for _, i := range g {
			t := tables[i]
			var root *string
			if err := conn.QueryRow(ctx, "SELECT pg_partition_root(c.oid)::text FROM pg_class c WHERE c.oid = $1::regclass AND c.relispartition",
				t.Source()).Scan(&root); err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("read partition root of %s: %w", t.Schema+"."+t.Name, err)
			} else if root == nil {
				return refused(fmt.Errorf("tables %s all map to Feldera table %s, but %s is not a partition: several sources may share a Feldera table only when they are partitions of one partitioned table", strings.Join(names, ", "), t.Dest, t.Schema+"."+t.Name))
			} else {
				roots[*root] = true
			}
		}
		if len(roots) > 1 {
			var rs []string
			for r := range roots {
				rs = append(rs, r)
			}
			sort.Strings(rs)
			return refused(fmt.Errorf("tables %s all map to Feldera table %s, but they are partitions of different tables (%s): several sources may share a Feldera table only when they are partitions of one partitioned table", strings.Join(names, ", "), tables[g[0]].Dest, strings.Join(rs, ", ")))
		}
	}
	return nil
}

// AnyKey reports whether any column is in the replica identity.
func AnyKey(cols []Column) bool {
	for _, c := range cols {
		if c.InKey {
			return true
		}
	}
	return false
}

// Source is what the catalog and the publication say about a table.
type Source struct {
	Cols        []Column
	Ident       byte   // relreplident
	Filter      string // the publication's row filter, "" for none
	Partitioned bool   // relkind 'p'
	Generated   bool   // a published generated column
}

// ReadSource reads a table's published columns in attnum order (the
// order pgoutput and COPY use), their types, which are in the replica
// identity, and the publication's row filter. The columns are those of
// pg_publication_tables.attnames: a column list, or every column the
// publication carries, which includes stored generated columns only when
// PG 18's publish_generated_columns = stored (or the column list) says so.
// Before PG 18 a generated column is never published (and some 15.x minors
// listed them in attnames anyway), so it is left out there.
func ReadSource(ctx context.Context, conn *pgx.Conn, t Table, publication string) (Source, error) {
	var si Source
	var ident, kind string
	var attnames []string
	var filter *string
	var version int
	err := conn.QueryRow(ctx, `SELECT c.relreplident::text, c.relkind::text, pt.attnames, pt.rowfilter,
			current_setting('server_version_num')::int
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		JOIN pg_publication_tables pt ON pt.schemaname = n.nspname AND pt.tablename = c.relname AND pt.pubname = $3
		WHERE n.nspname = $1 AND c.relname = $2`, t.Schema, t.Name, publication).Scan(&ident, &kind, &attnames, &filter, &version)
	if errors.Is(err, pgx.ErrNoRows) {
		return si, refused(fmt.Errorf("table %s does not exist", t.Schema+"."+t.Name))
	}
	if err != nil {
		return si, fmt.Errorf("read table %s: %w", t.Schema+"."+t.Name, err)
	}
	si.Ident, si.Partitioned = ident[0], kind == "p"
	if filter != nil {
		si.Filter = *filter
	}
	inList := map[string]bool{}
	for _, a := range attnames {
		inList[a] = true
	}
	rows, err := conn.Query(ctx, `SELECT a.attname, a.atttypid, a.atttypmod,
			COALESCE(a.attnum = ANY(ri.indkey::int2[]), false), a.attgenerated <> ''
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
		LEFT JOIN LATERAL (SELECT i.indkey FROM pg_index i WHERE i.indrelid = c.oid
			AND ((c.relreplident = 'd' AND i.indisprimary) OR (c.relreplident = 'i' AND i.indisreplident)) LIMIT 1) ri ON true
		WHERE n.nspname = $1 AND c.relname = $2 ORDER BY a.attnum`, t.Schema, t.Name)
	if err != nil {
		return si, fmt.Errorf("read columns of %s: %w", t.Schema+"."+t.Name, err)
	}
	defer rows.Close()
	for rows.Next() {
		var ci Column
		var generated bool
		if err := rows.Scan(&ci.Name, &ci.TypeOID, &ci.Typmod, &ci.InKey, &generated); err != nil {
			return si, err
		}
		if len(inList) > 0 && !inList[ci.Name] || generated && (version < 180000 || len(inList) == 0) {
			continue
		}
		si.Generated = si.Generated || generated
		si.Cols = append(si.Cols, ci)
	}
	return si, rows.Err()
}
