package connector

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfeldera/pgfeldera/decode"
	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/snapshot"
)

// pinnedGUCs fix the text output of values: the decoder parses text, so the
// snapshot connection and the replication connection must agree.
var pinnedGUCs = []string{
	"SET TimeZone = 'UTC'",
	"SET DateStyle = 'ISO'",
	"SET IntervalStyle = 'iso_8601'",
	"SET bytea_output = 'hex'",
	"SET extra_float_digits = 3",
}

// plan is what a session learned before streaming.
type plan struct {
	keys           []keyInfo // per target: its primary key for an incremental snapshot (chunkKeys), read once
	targets        []*decode.Target
	rels           []*decode.Rel    // per target: the catalog's columns, for COPY
	leaves         [][]string       // per target: a partitioned table's leaves (nil for any other table)
	routes         []*decode.Target // per route: its first target, whose Dest is the route's Feldera table
	groups         [][]int          // per route: the indexes of its targets (several for leaf partitions sharing a table)
	deploymentID   string
	model          feldera.FTModel      // the pipeline's fault-tolerance model
	faultTolerant  bool                 // model keeps completed state across a Feldera restart
	incarnation    string               // /stats incarnation_uuid: the Feldera process fed
	programVersion int64                // program_version: under exactly_once a change discards the journal
	noCheckpoint   bool                 // fault tolerant, and /checkpoints was empty before the probe
	checkpoints    []feldera.Checkpoint // /checkpoints when the session began
	ckptBefore     map[string]bool      // their UUIDs: they cover nothing this session completes
	gate           Gate                 // when a completed batch is durable, by the model
	walTimeout     time.Duration
	walBudget      int64        // bytes of WAL waiting for a checkpoint before one is asked for; 0: none
	types          *typeCatalog // pg_type beyond the built-ins, for the decoder
}

// columnInfo is a Postgres column as the catalog describes it.
type columnInfo struct {
	name    string
	typeOID uint32
	typmod  int32
	inKey   bool
}

// prepare runs the startup checks: wal_level, the publication and its
// tables, the Feldera pipeline and its schema, and a decoding plan for each
// table from the catalog, so a bad mapping is refused before streaming.
// atRest (for verify) accepts a Paused pipeline: it only reads.
func (c *Connector) prepare(ctx context.Context, atRest bool) (*plan, error) {
	conn, err := connectPG(ctx, c.cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("connect to postgres: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))

	wl, err := ReadWALLevel(ctx, conn, c.cfg.Slot)
	if err != nil {
		return nil, err
	}
	if note, warn, err := wl.Check(); err != nil {
		return nil, err
	} else if warn {
		c.logger.Warn("postgres: "+note, "wal_level", wl.Setting, "effective_wal_level", wl.Effective)
	} else if note != "" {
		c.logger.Info("postgres: "+note, "wal_level", wl.Setting, "effective_wal_level", wl.Effective)
	}
	var walTimeout string
	if err := conn.QueryRow(ctx, "SELECT current_setting('wal_sender_timeout')").Scan(&walTimeout); err != nil {
		return nil, fmt.Errorf("read settings: %w", err)
	}
	p := &plan{}
	p.walTimeout, _ = parsePGDuration(walTimeout)
	keep, maxWAL, err := readWALLimits(ctx, conn)
	if err != nil {
		return nil, err
	}
	p.walBudget = walBudget(c.cfg.CheckpointWAL, keep, maxWAL)

	var pubInsert, pubUpdate, pubDelete, pubTruncate bool
	err = conn.QueryRow(ctx, "SELECT pubinsert, pubupdate, pubdelete, pubtruncate FROM pg_publication WHERE pubname = $1", c.cfg.Publication).Scan(&pubInsert, &pubUpdate, &pubDelete, &pubTruncate)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fatal(fmt.Errorf("publication %q does not exist (CREATE PUBLICATION %s FOR TABLE ...)", c.cfg.Publication, quoteIdent(c.cfg.Publication)))
	}
	if err != nil {
		return nil, fmt.Errorf("read publication: %w", err)
	}
	if err := publishedActions(c.cfg.Publication, pubInsert, pubUpdate, pubDelete); err != nil {
		return nil, err
	}
	if !pubTruncate {
		c.logger.Warn("publication does not publish TRUNCATE (pubtruncate = false): a TRUNCATE in Postgres will never reach Feldera", "publication", c.cfg.Publication)
	}
	published := map[string]bool{}
	rows, err := conn.Query(ctx, "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = $1", c.cfg.Publication)
	if err != nil {
		return nil, fmt.Errorf("read publication tables: %w", err)
	}
	for rows.Next() {
		var s, t string
		if err := rows.Scan(&s, &t); err != nil {
			return nil, err
		}
		published[s+"."+t] = true
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var unmapped []string
	mapped := map[string]bool{}
	for _, t := range c.cfg.Tables {
		mapped[t.Schema+"."+t.Name] = true
		if !published[t.Schema+"."+t.Name] {
			return nil, fatal(fmt.Errorf("table %s is in TABLES but not in publication %q: it would never be updated (ALTER PUBLICATION %s ADD TABLE %s)",
				t.Schema+"."+t.Name, c.cfg.Publication, quoteIdent(c.cfg.Publication), t.Source()))
		}
	}
	for name := range published {
		if !mapped[name] {
			unmapped = append(unmapped, name)
		}
	}
	if len(unmapped) > 0 {
		c.logger.Warn("publication has tables TABLES does not map: a change to one of them stops the connector", "tables", strings.Join(unmapped, ","))
	}

	pipe, err := c.sink.Pipeline(ctx)
	if err != nil {
		var ae *feldera.APIError
		if errors.As(err, &ae) && (ae.StatusCode == 404 || ae.StatusCode == 401 || ae.StatusCode == 403) {
			return nil, fatal(fmt.Errorf("read feldera pipeline: %w", err))
		}
		return nil, fmt.Errorf("read feldera pipeline: %w", err)
	}
	if pipe.DeploymentStatus != "Running" && !(atRest && pipe.DeploymentStatus == "Paused") {
		return nil, fmt.Errorf("feldera pipeline %s is %s, not Running", pipe.Name, pipe.DeploymentStatus)
	}
	if pipe.ProgramInfo == nil {
		return nil, fmt.Errorf("feldera pipeline %s has no compiled program yet", pipe.Name)
	}
	if pipe.DeploymentID != nil {
		p.deploymentID = *pipe.DeploymentID
	}
	p.programVersion = pipe.ProgramVersion
	if p.types, err = loadTypes(ctx, conn, c.cfg.DSN); err != nil {
		return nil, err
	}
	routeOf, nroutes := Routes(c.cfg.Tables)
	p.routes, p.groups = make([]*decode.Target, nroutes), make([][]int, nroutes)
	for i, t := range c.cfg.Tables {
		rel, ok := pipe.ProgramInfo.Schema.Input(quoteIfNeeded(t.Dest))
		if !ok {
			return nil, fatal(fmt.Errorf("feldera pipeline %s has no table %s (destination of %s)", pipe.Name, t.Dest, t.Schema+"."+t.Name))
		}
		if len(rel.PrimaryKey) == 0 && c.cfg.RequirePrimaryKey {
			return nil, fatal(fmt.Errorf("feldera table %s has no PRIMARY KEY: replays after a crash would duplicate rows (declare one, or set FELDERA_REQUIRE_PRIMARY_KEY=false to accept that)", rel.Name))
		}
		target := &decode.Target{Schema: t.Schema, Name: t.Name, Route: routeOf[i], Dest: rel}
		if p.routes[target.Route] == nil {
			p.routes[target.Route] = target
		}
		p.groups[target.Route] = append(p.groups[target.Route], i)
		si, err := tableColumns(ctx, conn, t, c.cfg.Publication)
		if err != nil {
			return nil, err
		}
		cols, ident := si.cols, si.ident
		target.Filter, target.Query = si.filter, si.partitioned || si.generated || si.filter != ""
		if c.ignoreFilter {
			target.Filter = ""
		}
		if si.filter != "" {
			c.logger.Info("publication has a row filter for this table: the snapshot applies it too", "table", t.Schema+"."+t.Name, "filter", si.filter)
		}
		if len(rel.PrimaryKey) == 0 && ident != 'f' {
			// A keyless Feldera table is a multiset: an UPDATE must delete
			// the old row by its whole value, which only REPLICA IDENTITY
			// FULL sends. Without it the new row is inserted and the old
			// one stays: a duplicate per update.
			return nil, fatal(fmt.Errorf("feldera table %s has no PRIMARY KEY, so an update must retract the old row by its whole value, but its source table %s has REPLICA IDENTITY %s, which does not send the old row: every UPDATE would leave a duplicate (ALTER TABLE %s REPLICA IDENTITY FULL, or declare a PRIMARY KEY in Feldera)",
				rel.Name, t.Schema+"."+t.Name, map[byte]string{'n': "NOTHING", 'd': "DEFAULT", 'i': "USING INDEX"}[ident], t.Source()))
		}
		if len(rel.PrimaryKey) > 0 && (ident == 'n' || ident == 'd' && !anyKey(cols)) {
			return nil, fatal(fmt.Errorf("table %s has REPLICA IDENTITY %s and no usable key, but Feldera table %s has a PRIMARY KEY: deletes and key changes could not be retracted (add a primary key or set REPLICA IDENTITY FULL)",
				t.Schema+"."+t.Name, map[byte]string{'n': "NOTHING", 'd': "DEFAULT"}[ident], rel.Name))
		}
		dcols := make([]decode.Column, len(cols))
		for i, col := range cols {
			dcols[i] = decode.Column{Key: col.inKey, Name: col.name, TypeOID: col.typeOID, TypeMod: col.typmod}
		}
		opts := c.decodeOptions(p.types)
		drel, warnings, err := decode.NewRel(0, target, ident, dcols, &opts, nil)
		if err != nil {
			return nil, fatal(err)
		}
		var leaves []string
		if si.partitioned {
			if leaves, err = checkLeaves(ctx, conn, drel); err != nil {
				return nil, err
			}
			// pgoutput does not send a TRUNCATE of one partition of a
			// table published through its root (pgoutput_truncate skips
			// it): nothing tells pgfeldera.
			c.logger.Warn("a TRUNCATE of one partition of this table is never published (publish_via_partition_root): its rows would stay in Feldera; TRUNCATE the partitioned table, or DELETE a partition's rows, or run pgfeldera resnapshot for the table after truncating a partition",
				"table", t.Schema+"."+t.Name)
		}
		for _, w := range warnings {
			c.logger.Warn(w)
		}
		p.targets = append(p.targets, target)
		p.rels = append(p.rels, drel)
		p.leaves = append(p.leaves, leaves)
	}
	if err := checkShared(ctx, conn, c.cfg.Tables, p.groups); err != nil {
		return nil, err
	}
	model, err := pipe.FaultToleranceModel()
	if err != nil {
		return nil, fatal(fmt.Errorf("feldera pipeline %s: %w", pipe.Name, err))
	}
	p.model, p.faultTolerant = model, model.FaultTolerant()
	if p.faultTolerant {
		c.logger.Info("feldera pipeline has fault tolerance: completed state survives its restarts", "model", model)
	} else {
		c.logger.Info("feldera pipeline has no fault tolerance: a Feldera restart loses its state, and pgfeldera resnapshots", "model", model)
	}
	if atRest {
		return p, nil
	}
	st, err := c.sink.Stats(ctx)
	if err != nil {
		return nil, fmt.Errorf("read feldera pipeline stats: %w", err)
	}
	p.incarnation = st.GlobalMetrics.IncarnationUUID
	if len(st.Outputs) == 0 && !c.warnedOutputs {
		c.warnedOutputs = true
		c.logger.Warn("feldera pipeline has no output connectors: Feldera may then report a step complete before it finished (feldera#7169), so a read right after completion (the COUNT(*) checks of a TRUNCATE or resnapshot) can briefly see old rows and fail the check, which is retried; acknowledgements under at_least_once still wait for a checkpoint")
	}
	if err := c.chooseGate(ctx, p); err != nil {
		return nil, err
	}
	return p, nil
}

// chooseGate picks when a completed batch may be acknowledged, from the
// fault-tolerance model (DURABILITY.md §2.3):
//
//   - none: at completion. Feldera cannot keep anything across a restart;
//     a restart is noticed (a new incarnation or deployment) and the tables
//     are resnapshotted with retraction.
//   - exactly_once: at completion. Feldera journals each step's input
//     before the step's outputs are pushed, and completion waits for them,
//     so a complete token is replayed by a restart.
//   - at_least_once: once a checkpoint covers the completing step. A
//     restart restores the last checkpoint and nothing after it.
//
// Under fault tolerance, POST /checkpoint is tried once: a 501 means this
// Feldera cannot checkpoint, so the model it reports cannot hold.
func (c *Connector) chooseGate(ctx context.Context, p *plan) error {
	p.gate = GateFor(p.model, c.cfg.AckMode)
	why := "no fault tolerance: a Feldera restart loses its state and is resnapshotted"
	switch {
	case c.cfg.AckMode == AckAccepted:
		why = "FELDERA_ACK_MODE=accepted: acknowledged on HTTP 200 (unsafe)"
	case p.model == feldera.FTAtLeastOnce:
		why = "at_least_once: a restart restores the last checkpoint, so a batch is acknowledged once a checkpoint covers its step"
	case p.model == feldera.FTExactlyOnce:
		why = "exactly_once: a completed step is journaled and replayed by a restart"
	}
	if c.forceGate != nil {
		p.gate, why = *c.forceGate, "forced by a test"
	}
	if p.faultTolerant {
		cps, err := c.sink.Checkpoints(ctx)
		if err != nil && !feldera.IsCheckpointUnsupported(err) {
			return fmt.Errorf("read feldera checkpoints: %w", err)
		}
		p.noCheckpoint = len(cps) == 0
		p.checkpoints, p.ckptBefore = cps, map[string]bool{}
		for _, cp := range cps {
			p.ckptBefore[cp.UUID] = true
		}
	}
	if p.faultTolerant && !c.probed {
		if _, err := c.sink.RequestCheckpoint(ctx); err != nil {
			if feldera.IsCheckpointUnsupported(err) {
				return fatal(fmt.Errorf("feldera pipeline reports fault tolerance (%s) but answers POST /checkpoint with 501 EnterpriseFeature: this Feldera cannot checkpoint, so it cannot keep the state it reports it keeps; use an Enterprise Feldera, or remove fault_tolerance from the runtime configuration (pgfeldera then resnapshots after each Feldera restart)", p.model))
			}
			return fmt.Errorf("feldera: probe POST /checkpoint: %w", err)
		}
		c.probed = true
	}
	c.gate.Store(int32(p.gate))
	c.logger.Info("ack gate chosen", "gate", p.gate.String(), "model", p.model, "why", why,
		"deployment_id", p.deploymentID, "incarnation_uuid", p.incarnation, "checkpoint_wal", p.walBudget)
	return nil
}

// checkShared allows several sources for one Feldera table only when they
// are partitions of one partitioned table (published without
// publish_via_partition_root, so each leaf streams under its own name):
// they then have the same columns, and a row is in exactly one of them, so
// their union is the root's rows. Anything else would merge unrelated rows.
func checkShared(ctx context.Context, conn *pgx.Conn, tables []Table, groups [][]int) error {
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

// copySource is how a target's rows are read from Postgres.
func copySource(t *decode.Target) snapshot.Source {
	return snapshot.Source{Table: t.Source(), Filter: t.Filter, Query: t.Query}
}

// quoteIfNeeded turns a canonical Feldera name into the form
// ProgramSchema.Input expects.
func quoteIfNeeded(canonical string) string {
	if canonical != strings.ToLower(canonical) {
		return `"` + strings.ReplaceAll(canonical, `"`, `""`) + `"`
	}
	return canonical
}

func anyKey(cols []columnInfo) bool {
	for _, c := range cols {
		if c.inKey {
			return true
		}
	}
	return false
}

// publishedActions refuses a publication that does not publish inserts,
// updates and deletes: what it leaves out never reaches Feldera, which
// then keeps rows Postgres changed or deleted, silently.
func publishedActions(pub string, insert, update, delete bool) error {
	var missing []string
	for _, a := range []struct {
		name string
		on   bool
	}{{"insert", insert}, {"update", update}, {"delete", delete}} {
		if !a.on {
			missing = append(missing, a.name)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fatal(fmt.Errorf("publication %q does not publish %s: Feldera would never see those changes and keep rows Postgres changed or deleted (ALTER PUBLICATION %s SET (publish = 'insert, update, delete, truncate'))",
		pub, strings.Join(missing, ", "), quoteIdent(pub)))
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
func tableColumns(ctx context.Context, conn *pgx.Conn, t Table, publication string) (sourceInfo, error) {
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

// parsePGDuration reads a time GUC as SHOW prints it: "0", "500ms", "4s",
// "1min", "2h", "1d".
func parsePGDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	n := 0
	for _, c := range s[:i] {
		n = n*10 + int(c-'0')
	}
	unit := map[string]time.Duration{"": time.Millisecond, "us": time.Microsecond, "ms": time.Millisecond, "s": time.Second, "min": time.Minute, "h": time.Hour, "d": 24 * time.Hour}
	u, ok := unit[s[i:]]
	if i == 0 || !ok {
		return 0, fmt.Errorf("bad duration %q", s)
	}
	return time.Duration(n) * u, nil
}
