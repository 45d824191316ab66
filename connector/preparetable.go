package connector

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgfeldera/pgfeldera/catalog"
	"github.com/pgfeldera/pgfeldera/decode"
	"github.com/pgfeldera/pgfeldera/feldera"
)

// prepareTable checks one mapped table, its publication, its replica
// identity against its Feldera key and each column against the Feldera
// column, and adds its decoding plan to p. A table with a problem is
// recorded in ps and left out of p; pipe nil (Feldera unknown, forCheck)
// checks the Postgres side only.
func (c *Connector) prepareTable(ctx context.Context, conn *pgx.Conn, p *plan, t catalog.Table, route, i int, pipe *feldera.Pipeline, published map[string]bool, ps *problems) error {
	name := t.Schema + "." + t.Name
	si, ok, err := c.sourceTable(ctx, conn, t, published, ps)
	if !ok || err != nil || pipe == nil {
		return err
	}
	rel, ok := pipe.ProgramInfo.Schema.Input(quoteIfNeeded(t.Dest))
	if !ok {
		ps.add(name, refuse(name, fmt.Sprintf("feldera pipeline %s has no table %s (destination of %s)", pipe.Name, t.Dest, name),
			"declare it (pgfeldera ddl prints it), or map "+name+" to another table in TABLES"))
		return nil
	}
	if ps.add(name, identityProblem(t, rel, si, c.cfg.RequirePrimaryKey)) {
		return nil
	}
	target := &decode.Target{Schema: t.Schema, Name: t.Name, Route: route, Dest: rel}
	target.Filter, target.Query = si.filter, si.partitioned || si.generated || si.filter != ""
	if c.ignoreFilter {
		target.Filter = ""
	}
	if si.filter != "" {
		c.logger.Info("publication has a row filter for this table: the snapshot applies it too", "table", name, "filter", si.filter)
	}
	dcols := make([]decode.Column, len(si.cols))
	for i, col := range si.cols {
		dcols[i] = decode.Column{Key: col.inKey, Name: col.name, TypeOID: col.typeOID, TypeMod: col.typmod}
	}
	opts := c.decodeOptions(p.types)
	drel, warnings, err := decode.NewRel(0, target, si.ident, dcols, &opts, nil)
	if err != nil {
		ps.add(name, fatal(err))
		return nil
	}
	var leaves []string
	if si.partitioned {
		if leaves, err = checkLeaves(ctx, conn, drel); ps.add(name, err) || err != nil {
			return orNil(err)
		}
		// pgoutput does not send a TRUNCATE of one partition of a
		// table published through its root (pgoutput_truncate skips
		// it): nothing tells pgfeldera.
		c.logger.Warn("a TRUNCATE of one partition of this table is never published (publish_via_partition_root): its rows would stay in Feldera; TRUNCATE the partitioned table, or DELETE a partition's rows, or run pgfeldera resnapshot for the table after truncating a partition",
			"table", name)
	}
	for _, w := range warnings {
		c.logger.Warn(w)
	}
	if p.routes[route] == nil {
		p.routes[route] = target
	}
	p.groups[route] = append(p.groups[route], i)
	p.targets = append(p.targets, target)
	p.rels = append(p.rels, drel)
	p.leaves = append(p.leaves, leaves)
	return nil
}

// sourceTable checks a mapped table on the Postgres side (in the
// publication, readable by the role) and reads its columns; ok is false
// when there is nothing more to check of it (a problem recorded, or no
// publication to read it from).
func (c *Connector) sourceTable(ctx context.Context, conn *pgx.Conn, t catalog.Table, published map[string]bool, ps *problems) (si sourceInfo, ok bool, err error) {
	name := t.Schema + "." + t.Name
	if published == nil {
		return si, false, nil // no publication: nothing more to learn of its tables
	}
	if !published[name] {
		ps.add(name, refuse(name, fmt.Sprintf("table %s is in TABLES but not in publication %q: it would never be updated", name, c.cfg.Publication),
			"ALTER PUBLICATION "+catalog.QuoteIdent(c.cfg.Publication)+" ADD TABLE "+t.Source()))
		return si, false, nil
	}
	var canSelect bool
	if err := conn.QueryRow(ctx, "SELECT has_table_privilege($1::regclass, 'SELECT')", t.Source()).Scan(&canSelect); err != nil {
		return si, false, fmt.Errorf("read privileges on %s: %w", name, err)
	}
	if !canSelect {
		// A snapshot, a resnapshot after Feldera lost its state and verify
		// all read the table.
		ps.add(name, refuse(name, fmt.Sprintf("the role of PG_DSN has no SELECT on %s: the snapshot cannot read it", name),
			"GRANT SELECT ON "+t.Source()+" TO "+catalog.QuoteIdent(c.user(conn))))
	}
	si, err = tableColumns(ctx, conn, t, c.cfg.Publication)
	if ps.add(name, err) || err != nil {
		return si, false, orNil(err)
	}
	return si, true, nil
}

// identityProblem refuses a source whose replica identity cannot keep its
// Feldera table exact, or a keyless Feldera table unless
// FELDERA_REQUIRE_PRIMARY_KEY=false accepts the duplicates replays make.
func identityProblem(t catalog.Table, rel feldera.Relation, si sourceInfo, requireKey bool) error {
	name := t.Schema + "." + t.Name
	identName := map[byte]string{'n': "NOTHING", 'd': "DEFAULT", 'i': "USING INDEX", 'f': "FULL"}[si.ident]
	switch {
	case len(rel.PrimaryKey) == 0 && requireKey:
		return refuse(name, fmt.Sprintf("feldera table %s has no PRIMARY KEY: replays after a crash would duplicate rows", rel.Name),
			"declare one, or set FELDERA_REQUIRE_PRIMARY_KEY=false to accept that")
	case len(rel.PrimaryKey) == 0 && si.ident != 'f':
		// A keyless Feldera table is a multiset: an UPDATE must delete
		// the old row by its whole value, which only REPLICA IDENTITY
		// FULL sends. Without it the new row is inserted and the old
		// one stays: a duplicate per update.
		return refuse(name, fmt.Sprintf("feldera table %s has no PRIMARY KEY, so an update must retract the old row by its whole value, but its source table %s has REPLICA IDENTITY %s, which does not send the old row: every UPDATE would leave a duplicate",
			rel.Name, name, identName), "ALTER TABLE "+t.Source()+" REPLICA IDENTITY FULL, or declare a PRIMARY KEY in Feldera")
	case len(rel.PrimaryKey) > 0 && (si.ident == 'n' || si.ident == 'd' && !anyKey(si.cols)):
		return refuse(name, fmt.Sprintf("table %s has REPLICA IDENTITY %s and no usable key, but Feldera table %s has a PRIMARY KEY: deletes and key changes could not be retracted",
			name, identName, rel.Name), "add a primary key or set REPLICA IDENTITY FULL")
	}
	return nil
}

// orNil is err unless it is fatal (then it was recorded as a problem).
func orNil(err error) error {
	if isFatal(err) {
		return nil
	}
	return err
}

// user is the role PG_DSN connects as.
func (c *Connector) user(conn *pgx.Conn) string {
	return conn.Config().User
}

// checkShared allows several sources for one Feldera table only when they
// are partitions of one partitioned table (published without
// publish_via_partition_root, so each leaf streams under its own name):
// they then have the same columns, and a row is in exactly one of them, so
// their union is the root's rows. Anything else would merge unrelated rows.
func checkShared(ctx context.Context, conn *pgx.Conn, tables []catalog.Table, groups [][]int) error {
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
				return fatal(fmt.Errorf("tables %s all map to Feldera table %s, but %s is not a partition: several sources may share a Feldera table only when they are partitions of one partitioned table", strings.Join(names, ", "), t.Dest, t.Schema+"."+t.Name))
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
			return fatal(fmt.Errorf("tables %s all map to Feldera table %s, but they are partitions of different tables (%s): several sources may share a Feldera table only when they are partitions of one partitioned table", strings.Join(names, ", "), tables[g[0]].Dest, strings.Join(rs, ", ")))
		}
	}
	return nil
}

func anyKey(cols []columnInfo) bool {
	for _, c := range cols {
		if c.inKey {
			return true
		}
	}
	return false
}

// sourceInfo is what the catalog and the publication say about a table.
type sourceInfo struct {
	cols        []columnInfo
	ident       byte   // relreplident
	filter      string // the publication's row filter, "" for none
	partitioned bool   // relkind 'p'
	generated   bool   // a published generated column
}

// tableColumns reads a table's published columns in attnum order (the
// order pgoutput and COPY use), their types, which are in the replica
// identity, and the publication's row filter. The columns are those of
// pg_publication_tables.attnames: a column list, or every column the
// publication carries, which includes stored generated columns only when
// PG 18's publish_generated_columns = stored (or the column list) says so.
// Before PG 18 a generated column is never published (and some 15.x minors
// listed them in attnames anyway), so it is left out there.
func tableColumns(ctx context.Context, conn *pgx.Conn, t catalog.Table, publication string) (sourceInfo, error) {
	var si sourceInfo
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
		return si, fatal(fmt.Errorf("table %s does not exist", t.Schema+"."+t.Name))
	}
	if err != nil {
		return si, fmt.Errorf("read table %s: %w", t.Schema+"."+t.Name, err)
	}
	si.ident, si.partitioned = ident[0], kind == "p"
	if filter != nil {
		si.filter = *filter
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
		var ci columnInfo
		var generated bool
		if err := rows.Scan(&ci.name, &ci.typeOID, &ci.typmod, &ci.inKey, &generated); err != nil {
			return si, err
		}
		if len(inList) > 0 && !inList[ci.name] || generated && (version < 180000 || len(inList) == 0) {
			continue
		}
		si.generated = si.generated || generated
		si.cols = append(si.cols, ci)
	}
	return si, rows.Err()
}
