package setup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfeldera/pgfeldera/catalog"
	"github.com/pgfeldera/pgfeldera/decode"
	"github.com/pgfeldera/pgfeldera/decode/pgvalue"
	"github.com/pgfeldera/pgfeldera/delivery"
	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/internal/fatal"
	"github.com/pgfeldera/pgfeldera/replconn"
)

// Config is what the startup checks need of the connector's settings.
type Config struct {
	DSN, Slot, Publication string
	Tables                 []catalog.Table
	RequirePrimaryKey      bool // FELDERA_REQUIRE_PRIMARY_KEY
	// Progress is FELDERA_PROGRESS_TABLE: ProgressAuto (""), ProgressOn
	// or ProgressOff (progress.go).
	Progress      string
	CheckpointWAL int64 // FELDERA_CHECKPOINT_WAL (see walBudget)
	// Options are the decoder's planning options for the plan's types.
	Options func(types *catalog.Types) decode.Options
	// IgnoreFilter reads sources without the publication's row filter:
	// a test's unsafe variant; false in production.
	IgnoreFilter bool
	Logger       *slog.Logger
}

// Pipeliner reads the Feldera pipeline's status and schema.
// *feldera.Client satisfies it.
type Pipeliner interface {
	Pipeline(ctx context.Context) (*feldera.Pipeline, error)
	Stats(ctx context.Context) (*feldera.Stats, error)
}

// checker is one look at the prerequisites.
type checker struct {
	cfg    Config
	pipes  Pipeliner
	logger *slog.Logger
}

// Plan is what a session learned before streaming.
type Plan struct {
	catalog.Mapping
	DeploymentID   string
	Model          feldera.FTModel      // the pipeline's fault-tolerance model
	FaultTolerant  bool                 // model keeps completed state across a Feldera restart
	Incarnation    string               // /stats incarnation_uuid: the Feldera process fed
	ProgramVersion int64                // program_version: under exactly_once a change discards the journal
	NoCheckpoint   bool                 // fault tolerant, and /checkpoints was empty before the probe
	Checkpoints    []feldera.Checkpoint // /checkpoints when the session began
	CkptBefore     map[string]bool      // their UUIDs: they cover nothing this session completes
	Gate           delivery.Gate        // when a completed batch is durable, by the model
	WALTimeout     time.Duration
	WALBudget      int64          // bytes of WAL waiting for a checkpoint before one is asked for; 0: none
	Types          *catalog.Types // pg_type beyond the built-ins, for the decoder
	// Progress is the pipeline's progress table, nil when none is used
	// (FELDERA_PROGRESS_TABLE, progress.go).
	Progress *feldera.Relation
}

// Mode is what a look at the prerequisites is for.
type Mode int

const (
	ForRun    Mode = iota
	ForVerify      // reads only: a Paused pipeline is accepted; no stats, no gate
	ForCheck       // reads only, and a pipeline that cannot be used is a problem, not a retry
)

// prepareSource checks the server and the publication, and returns the
// tables the publication carries ("schema.table").
func (c *checker) prepareSource(ctx context.Context, conn *pgx.Conn, p *Plan, ps *Found) (map[string]bool, error) {
	wl, err := ReadWALLevel(ctx, conn, c.cfg.Slot)
	if err != nil {
		return nil, err
	}
	note, warn, err := wl.Check()
	switch {
	case ps.Add("wal_level", err):
	case err != nil:
		return nil, err
	case warn:
		c.logger.Warn("postgres: "+note, "wal_level", wl.Setting, "effective_wal_level", wl.Effective)
	case note != "":
		c.logger.Info("postgres: "+note, "wal_level", wl.Setting, "effective_wal_level", wl.Effective)
	}
	var walTimeout string
	if err := conn.QueryRow(ctx, "SELECT current_setting('wal_sender_timeout')").Scan(&walTimeout); err != nil {
		return nil, fmt.Errorf("read settings: %w", err)
	}
	p.WALTimeout, _ = parsePGDuration(walTimeout)
	keep, maxWAL, err := readWALLimits(ctx, conn)
	if err != nil {
		return nil, err
	}
	p.WALBudget = walBudget(c.cfg.CheckpointWAL, keep, maxWAL)
	return c.readPublication(ctx, conn, ps)
}

// readPublication checks what the publication publishes and returns the
// tables it carries ("schema.table"); nil when it does not exist.
func (c *checker) readPublication(ctx context.Context, conn *pgx.Conn, ps *Found) (map[string]bool, error) {
	pub := c.cfg.Publication
	var pubInsert, pubUpdate, pubDelete, pubTruncate bool
	err := conn.QueryRow(ctx, "SELECT pubinsert, pubupdate, pubdelete, pubtruncate FROM pg_publication WHERE pubname = $1", pub).Scan(&pubInsert, &pubUpdate, &pubDelete, &pubTruncate)
	if errors.Is(err, pgx.ErrNoRows) {
		ps.Add("PG_PUBLICATION", Refuse("PG_PUBLICATION", fmt.Sprintf("publication %q does not exist", pub), "CREATE PUBLICATION "+pgvalue.QuoteIdent(pub)+" FOR TABLE ..."))
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read publication: %w", err)
	}
	ps.Add("PG_PUBLICATION", publishedActions(pub, pubInsert, pubUpdate, pubDelete))
	if !pubTruncate {
		c.logger.Warn("publication does not publish TRUNCATE (pubtruncate = false): a TRUNCATE in Postgres will never reach Feldera", "publication", pub)
	}
	published := map[string]bool{}
	rows, err := conn.Query(ctx, "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = $1", pub)
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
	}
	for name := range published {
		if !mapped[name] {
			unmapped = append(unmapped, name)
		}
	}
	if len(unmapped) > 0 {
		sort.Strings(unmapped)
		c.logger.Warn("publication has tables TABLES does not map: a change to one of them stops the connector", "tables", strings.Join(unmapped, ","))
	}
	return published, nil
}

// ReadPipeline reads the Feldera pipeline into p as Prepare does
// (preparePipeline): check reads it alone when Postgres cannot be reached.
func ReadPipeline(ctx context.Context, pipes Pipeliner, logger *slog.Logger, p *Plan, mode Mode, ps *Found) (*feldera.Pipeline, error) {
	c := &checker{pipes: pipes, logger: logger}
	return c.preparePipeline(ctx, p, mode, ps)
}

// preparePipeline reads the Feldera pipeline. Under forCheck a pipeline
// that cannot be used is a problem, and the result is nil when its schema
// is unknown; a run retries it (fatal only when the key or the name is
// wrong).
func (c *checker) preparePipeline(ctx context.Context, p *Plan, mode Mode, ps *Found) (*feldera.Pipeline, error) {
	const subject = "FELDERA_PIPELINE"
	pipe, err := c.pipes.Pipeline(ctx)
	if err != nil {
		fix := pipelineFix(err)
		if mode == ForCheck {
			ps.Add(subject, Refuse(subject, "read feldera pipeline: "+err.Error(), fix))
			return nil, nil
		}
		if fix != "" {
			return nil, Refuse(subject, "read feldera pipeline: "+err.Error(), fix)
		}
		return nil, fmt.Errorf("read feldera pipeline: %w", err)
	}
	if pipe.DeploymentStatus != "Running" && !(mode == ForVerify && pipe.DeploymentStatus == "Paused") {
		err := fmt.Errorf("feldera pipeline %s is %s, not Running", pipe.Name, pipe.DeploymentStatus)
		if mode != ForCheck {
			return nil, err
		}
		ps.Add(subject, Refuse(subject, err.Error(), "start the pipeline"))
	}
	if pipe.ProgramInfo == nil {
		err := fmt.Errorf("feldera pipeline %s has no compiled program yet", pipe.Name)
		if mode != ForCheck {
			return nil, err
		}
		ps.Add(subject, Refuse(subject, err.Error(), "wait for the compilation, or fix the program's errors"))
		return nil, nil
	}
	if pipe.DeploymentID != nil {
		p.DeploymentID = *pipe.DeploymentID
	}
	p.ProgramVersion = pipe.ProgramVersion
	model, err := pipe.FaultToleranceModel()
	if err != nil {
		ps.Add(subject, fatal.Wrap(fmt.Errorf("feldera pipeline %s: %w", pipe.Name, err)))
		return pipe, nil
	}
	p.Model, p.FaultTolerant = model, model.FaultTolerant()
	if p.FaultTolerant && mode != ForVerify {
		if err := c.canCheckpoint(ctx, pipe.Name, model); err != nil {
			if mode != ForCheck {
				return nil, err
			}
			ps.Add(subject, err)
		}
	}
	if mode == ForCheck {
		return pipe, nil
	}
	if p.FaultTolerant {
		c.logger.Info("feldera pipeline has fault tolerance: completed state survives its restarts", "model", model)
	} else {
		c.logger.Info("feldera pipeline has no fault tolerance: a Feldera restart loses its state, and pgfeldera resnapshots", "model", model)
	}
	return pipe, nil
}

// canCheckpoint refuses a fault-tolerant pipeline that reports no
// checkpoint can succeed until its configuration changes (/stats
// permanent_checkpoint_errors): under at_least_once nothing completed
// could ever be acknowledged, and under exactly_once a program change
// would leave no journal; without the refusal the run found it only at
// NO_PROGRESS_TIMEOUT.
func (c *checker) canCheckpoint(ctx context.Context, name string, model feldera.FTModel) error {
	st, err := c.pipes.Stats(ctx)
	if err != nil {
		return fmt.Errorf("read feldera pipeline %s's /stats: %w", name, err)
	}
	if len(st.PermanentCheckpointErrors) == 0 {
		return nil
	}
	var whys, fixes []string
	for _, raw := range st.PermanentCheckpointErrors {
		whys = append(whys, string(raw))
		fixes = append(fixes, checkpointFix(raw))
	}
	return Refuse("FELDERA_PIPELINE", fmt.Sprintf("feldera pipeline %s has fault tolerance (%s) but reports that no checkpoint can succeed (permanent_checkpoint_errors: %s): nothing it completes could be made durable",
		name, model, strings.Join(whys, ", ")), strings.Join(slices.Compact(fixes), "; "))
}

// checkpointFix is the fix for one of Feldera's permanent checkpoint
// errors (a PermanentSuspendError: StorageRequired, EnterpriseFeature,
// UnsupportedInputEndpoint; DURABILITY.md, /stats).
func checkpointFix(raw json.RawMessage) string {
	var name string
	if json.Unmarshal(raw, &name) != nil {
		var m map[string]string
		if json.Unmarshal(raw, &m) == nil {
			if ep, ok := m["UnsupportedInputEndpoint"]; ok {
				return fmt.Sprintf("input connector %s cannot checkpoint: remove it, or use one that supports fault tolerance", ep)
			}
		}
	}
	switch name {
	case "StorageRequired":
		return "give the pipeline storage (runtime_config.storage): checkpoints are written there"
	case "EnterpriseFeature":
		return "fault tolerance needs Feldera Enterprise: use it, or run the pipeline without fault tolerance"
	}
	return "fix the pipeline's configuration so that it can checkpoint (docs.feldera.com, fault tolerance)"
}

// quoteIfNeeded turns a canonical Feldera name into the form
// ProgramSchema.Input expects.
func quoteIfNeeded(canonical string) string {
	if canonical != strings.ToLower(canonical) {
		return `"` + strings.ReplaceAll(canonical, `"`, `""`) + `"`
	}
	return canonical
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
	return Refuse("PG_PUBLICATION", fmt.Sprintf("publication %q does not publish %s: Feldera would never see those changes and keep rows Postgres changed or deleted",
		pub, strings.Join(missing, ", ")), "ALTER PUBLICATION "+pgvalue.QuoteIdent(pub)+" SET (publish = 'insert, update, delete, truncate')")
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

// Prepare runs the startup checks: wal_level, the publication and its
// tables, the Feldera pipeline and its schema, and a decoding plan for each
// table from the catalog, so a bad mapping is refused before streaming.
// Every refusal found is collected and returned at once (Problems).
func Prepare(ctx context.Context, cfg Config, pipes Pipeliner, mode Mode) (*Plan, error) {
	c := &checker{cfg: cfg, pipes: pipes, logger: cfg.Logger}
	conn, err := replconn.Connect(ctx, c.cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("connect to postgres: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var ps Found
	p := &Plan{}
	published, err := c.prepareSource(ctx, conn, p, &ps)
	if err != nil {
		return nil, err
	}
	pipe, err := c.preparePipeline(ctx, p, mode, &ps)
	if err != nil {
		return nil, err
	}
	if pipe != nil && pipe.ProgramInfo != nil && mode != ForVerify {
		p.Progress, err = progressTable(pipe.ProgramInfo.Schema, c.cfg.Progress)
		ps.Add("FELDERA_PROGRESS_TABLE", err)
	}
	if p.Types, err = catalog.LoadTypes(ctx, conn, c.cfg.DSN); err != nil {
		return nil, err
	}
	routeOf, nroutes := catalog.Routes(c.cfg.Tables)
	p.Routes, p.Groups = make([]*decode.Target, nroutes), make([][]int, nroutes)
	for i, t := range c.cfg.Tables {
		if err := c.prepareTable(ctx, conn, p, t, routeOf[i], i, pipe, published, &ps); err != nil {
			return nil, err
		}
	}
	if len(ps.List) == 0 {
		if err := catalog.CheckShared(ctx, conn, c.cfg.Tables, p.Groups); !ps.Add("TABLES", err) && err != nil {
			return nil, err
		}
	}
	return p, ps.Err()
}

// pipelineFix is the fix for a pipeline Feldera refused to show: a name
// it does not know, or a key it does not accept; "" for any other error,
// which a run retries.
func pipelineFix(err error) string {
	var ae *feldera.APIError
	if !errors.As(err, &ae) {
		return ""
	}
	switch ae.StatusCode {
	case 404:
		return "check FELDERA_PIPELINE: no pipeline of that name at FELDERA_URL is visible to this API key (GET /v0/pipelines lists those that are)"
	case 401, 403:
		return "check FELDERA_API_KEY: Feldera did not accept it for this pipeline"
	}
	return ""
}
