package setup

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pgfeldera/pgfeldera/catalog"
	"github.com/pgfeldera/pgfeldera/decode"
	"github.com/pgfeldera/pgfeldera/decode/pgvalue"
	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/internal/fatal"
)

// prepareTable checks one mapped table, its publication, its replica
// identity against its Feldera key and each column against the Feldera
// column, and adds its decoding plan to p. A table with a problem is
// recorded in ps and left out of p; pipe nil (Feldera unknown, forCheck)
// checks the Postgres side only.
func (c *checker) prepareTable(ctx context.Context, conn *pgx.Conn, p *Plan, t catalog.Table, route, i int, pipe *feldera.Pipeline, published map[string]bool, ps *Found) error {
	name := t.Schema + "." + t.Name
	si, ok, err := c.sourceTable(ctx, conn, t, published, ps)
	if !ok || err != nil || pipe == nil {
		return err
	}
	rel, ok := pipe.ProgramInfo.Schema.Input(quoteIfNeeded(t.Dest))
	if !ok {
		ps.Add(name, Refuse(name, fmt.Sprintf("feldera pipeline %s has no table %s (destination of %s)", pipe.Name, t.Dest, name),
			"declare it (pgfeldera ddl prints it), or map "+name+" to another table in TABLES"))
		return nil
	}
	// The progress table makes replays exact on a keyless table too
	// (docs/exactly-once-design.md): no duplicates to accept.
	if ps.Add(name, identityProblem(t, rel, si, c.cfg.RequirePrimaryKey && p.Progress == nil)) {
		return nil
	}
	target := &decode.Target{Schema: t.Schema, Name: t.Name, Route: route, Dest: rel}
	target.Filter, target.Query = si.Filter, si.Partitioned || si.Generated || si.Filter != ""
	if c.cfg.IgnoreFilter {
		target.Filter = ""
	}
	if si.Filter != "" {
		c.logger.Info("publication has a row filter for this table: the snapshot applies it too", "table", name, "filter", si.Filter)
	}
	dcols := make([]decode.Column, len(si.Cols))
	for i, col := range si.Cols {
		dcols[i] = decode.Column{Key: col.InKey, Name: col.Name, TypeOID: col.TypeOID, TypeMod: col.Typmod}
	}
	opts := c.cfg.Options(p.Types)
	drel, warnings, err := decode.NewRel(0, target, si.Ident, dcols, &opts, nil)
	if err != nil {
		ps.Add(name, fatal.Wrap(err))
		return nil
	}
	var leaves []string
	if si.Partitioned {
		if leaves, err = catalog.CheckLeaves(ctx, conn, drel); ps.Add(name, err) || err != nil {
			return OrNil(err)
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
	if p.Routes[route] == nil {
		p.Routes[route] = target
	}
	p.Groups[route] = append(p.Groups[route], i)
	p.Targets = append(p.Targets, target)
	p.Rels = append(p.Rels, drel)
	p.Leaves = append(p.Leaves, leaves)
	return nil
}

// sourceTable checks a mapped table on the Postgres side (in the
// publication, readable by the role) and reads its columns; ok is false
// when there is nothing more to check of it (a problem recorded, or no
// publication to read it from).
func (c *checker) sourceTable(ctx context.Context, conn *pgx.Conn, t catalog.Table, published map[string]bool, ps *Found) (si catalog.Source, ok bool, err error) {
	name := t.Schema + "." + t.Name
	if published == nil {
		return si, false, nil // no publication: nothing more to learn of its tables
	}
	if !published[name] {
		var exists bool
		if err := conn.QueryRow(ctx, "SELECT to_regclass($1::text) IS NOT NULL", t.Source()).Scan(&exists); err != nil {
			return si, false, fmt.Errorf("look up %s: %w", name, err)
		}
		if !exists {
			ps.Add(name, Refuse(name, fmt.Sprintf("table %s is in TABLES but does not exist in this database", name),
				"create it, or correct its name in TABLES (a table outside the public schema is written schema.table)"))
			return si, false, nil
		}
		ps.Add(name, Refuse(name, fmt.Sprintf("table %s is in TABLES but not in publication %q: it would never be updated", name, c.cfg.Publication),
			"ALTER PUBLICATION "+pgvalue.QuoteIdent(c.cfg.Publication)+" ADD TABLE "+t.Source()))
		return si, false, nil
	}
	var canSelect bool
	if err := conn.QueryRow(ctx, "SELECT has_table_privilege($1::regclass, 'SELECT')", t.Source()).Scan(&canSelect); err != nil {
		return si, false, fmt.Errorf("read privileges on %s: %w", name, err)
	}
	if !canSelect {
		// A snapshot, a resnapshot after Feldera lost its state and verify
		// all read the table.
		ps.Add(name, Refuse(name, fmt.Sprintf("the role of PG_DSN has no SELECT on %s: the snapshot cannot read it", name),
			"GRANT SELECT ON "+t.Source()+" TO "+pgvalue.QuoteIdent(c.user(conn))))
	}
	si, err = catalog.ReadSource(ctx, conn, t, c.cfg.Publication)
	if ps.Add(name, err) || err != nil {
		return si, false, OrNil(err)
	}
	return si, true, nil
}

// identityProblem refuses a source whose replica identity cannot keep its
// Feldera table exact, or, given requireKey, a keyless Feldera table:
// without the progress table replays duplicate its rows, unless
// FELDERA_REQUIRE_PRIMARY_KEY=false accepts that.
func identityProblem(t catalog.Table, rel feldera.Relation, si catalog.Source, requireKey bool) error {
	name := t.Schema + "." + t.Name
	identName := map[byte]string{'n': "NOTHING", 'd': "DEFAULT", 'i': "USING INDEX", 'f': "FULL"}[si.Ident]
	switch {
	case len(rel.PrimaryKey) == 0 && requireKey:
		return Refuse(name, fmt.Sprintf("feldera table %s has no PRIMARY KEY: replays after a crash would duplicate rows", rel.Name),
			"declare one, declare the progress table that makes replays exact ("+ProgressTable+", FELDERA_PROGRESS_TABLE; `pgfeldera ddl` prints it), or set FELDERA_REQUIRE_PRIMARY_KEY=false to accept duplicates")
	case len(rel.PrimaryKey) == 0 && !rel.Materialized:
		// A TRUNCATE, a resnapshot and verify read a keyless table's rows
		// back to retract them by whole value, which Feldera's ad-hoc
		// queries serve only from a materialized table.
		return Refuse(name, fmt.Sprintf("feldera table %s has no PRIMARY KEY and is not materialized: its rows could not be read back to retract them (a TRUNCATE, a resnapshot)", rel.Name),
			"declare it WITH ('materialized' = 'true') (`pgfeldera ddl` prints it so), or declare a PRIMARY KEY")
	case len(rel.PrimaryKey) == 0 && si.Ident != 'f':
		// A keyless Feldera table is a multiset: an UPDATE must delete
		// the old row by its whole value, which only REPLICA IDENTITY
		// FULL sends. Without it the new row is inserted and the old
		// one stays: a duplicate per update.
		return Refuse(name, fmt.Sprintf("feldera table %s has no PRIMARY KEY, so an update must retract the old row by its whole value, but its source table %s has REPLICA IDENTITY %s, which does not send the old row: every UPDATE would leave a duplicate",
			rel.Name, name, identName), "ALTER TABLE "+t.Source()+" REPLICA IDENTITY FULL, or declare a PRIMARY KEY in Feldera")
	case len(rel.PrimaryKey) > 0 && (si.Ident == 'n' || si.Ident == 'd' && !catalog.AnyKey(si.Cols)):
		return Refuse(name, fmt.Sprintf("table %s has REPLICA IDENTITY %s and no usable key, but Feldera table %s has a PRIMARY KEY: deletes and key changes could not be retracted",
			name, identName, rel.Name), "add a primary key or set REPLICA IDENTITY FULL")
	}
	return nil
}

// OrNil is err unless it is fatal (then it was recorded as a problem).
func OrNil(err error) error {
	if fatal.Is(err) {
		return nil
	}
	return err
}

// user is the role PG_DSN connects as.
func (c *checker) user(conn *pgx.Conn) string {
	return conn.Config().User
}
