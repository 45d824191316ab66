package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/pgfeldera/pgfeldera/catalog"
	"github.com/pgfeldera/pgfeldera/crashtest"
	"github.com/pgfeldera/pgfeldera/feldera"
)

// Config is every setting of `pgfeldera run`, parsed from the environment
// and flags (a flag wins over its variable), with defaults filled in.
type Config struct {
	DSN                 string
	Publication         string
	Slot                string
	Tables              []catalog.Table
	FelderaURL          string
	Pipeline            string
	APIKey              string
	AckMode             string
	RequirePrimaryKey   bool
	CompletionTimeout   time.Duration
	CommitStallTimeout  time.Duration
	IngressFence        time.Duration
	RequestTimeout      time.Duration
	StopTimeout         time.Duration
	CheckpointAfter     time.Duration
	CheckpointWAL       int64 // 0: from max_slot_wal_keep_size; -1: off
	BatchMaxRows        int
	SnapshotChunkRows   int
	SnapshotParallelism int
	SlotFailover        string
	ReplicationTimeout  time.Duration
	BatchMaxBytes       int
	BatchMaxInFlight    int
	Transactions        string
	SnapshotTxn         bool
	ProgressTable       string
	NullUnrepresentable bool
	BatchLinger         time.Duration
	SnapshotMode        string
	StateFile           string
	NoProgressTimeout   time.Duration
	CrashAt             string
	CrashAfterBatches   int
	HTTPAddr            string
	LogLevel            string
	LogFormat           string
}

// ConfigError is a bad setting: exit code 2, before any connection.
type ConfigError struct{ Msg string }

func (e *ConfigError) Error() string { return e.Msg }

// parseBytes reads a size: an integer of bytes, or one with a KiB, MiB or
// GiB suffix.
func parseBytes(v string) (int, bool) {
	mult := 1
	for suffix, m := range map[string]int{"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30} {
		if rest, ok := strings.CutSuffix(v, suffix); ok {
			v, mult = rest, m
			break
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > (1<<40)/int64(mult) {
		return 0, false
	}
	return int(n) * mult, true
}

func badValue(env, value, allowed string) error {
	return &ConfigError{Msg: fmt.Sprintf("%s=%q is invalid: %s", env, value, allowed)}
}

// setting is one configuration variable: its environment name, flag,
// default and help, and how it is parsed into Config.
type setting struct {
	Env     string
	Default string
	Help    string
	Secret  bool
	parse   func(c *Config, v string) error
}

// Flag is the setting's flag name: PG_DSN → -pg-dsn.
func (s setting) Flag() string { return strings.ToLower(strings.ReplaceAll(s.Env, "_", "-")) }

var slotRE = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// settings lists every variable in DESIGN.md's configuration table (plus
// the single-table shorthand), in the order --help prints them.
var settings = []setting{
	{Env: "PG_DSN", Help: "libpq URL or key=value DSN of the source; replication=database is added for the stream", Secret: true,
		parse: func(c *Config, v string) error { c.DSN = v; return nil }},
	{Env: "PG_PUBLICATION", Default: "pgfeldera", Help: "publication to read",
		parse: func(c *Config, v string) error {
			if v == "" || len(v) > 63 {
				return badValue("PG_PUBLICATION", v, "a publication name of 1 to 63 bytes")
			}
			c.Publication = v
			return nil
		}},
	{Env: "PG_SLOT", Default: "pgfeldera", Help: "logical replication slot to own (created when missing)",
		parse: func(c *Config, v string) error {
			if !slotRE.MatchString(v) {
				return badValue("PG_SLOT", v, "1 to 63 of a-z, 0-9 and _ (Postgres slot names)")
			}
			c.Slot = v
			return nil
		}},
	{Env: "PG_SLOT_FAILOVER", Default: "auto", Help: "create the slot with FAILOVER so a PostgreSQL 17+ standby with sync_replication_slots keeps it through a failover: auto (on when the server is 17+), on (refuse an older server, and an empty synchronized_standby_slots), off",
		parse: func(c *Config, v string) error {
			if v != "auto" && v != "on" && v != "off" {
				return badValue("PG_SLOT_FAILOVER", v, "auto, on or off")
			}
			c.SlotFailover = v
			return nil
		}},
	{Env: "PG_REPLICATION_TIMEOUT", Default: "", Help: "end a replication session when the server said nothing for this long (a reply is asked for at half of it), and a chunk read that received no row for it; empty: the server's wal_sender_timeout (60s when that is 0)",
		parse: optional(durationInto("PG_REPLICATION_TIMEOUT", func(c *Config) *time.Duration { return &c.ReplicationTimeout }))},
	{Env: "TABLES", Help: "tables to stream: users,items or users:USERS,public.items:LINEITEMS (pg name[:feldera name])",
		parse: func(c *Config, v string) error {
			if v == "" {
				return nil
			}
			t, err := catalog.ParseTables(v)
			if err != nil {
				return badValue("TABLES", v, err.Error())
			}
			c.Tables = t
			return nil
		}},
	{Env: "PG_TABLE", Help: "single-table shorthand for TABLES: the Postgres table"},
	{Env: "FELDERA_TABLE", Help: "single-table shorthand: the Feldera table (default: PG_TABLE's name)"},
	{Env: "FELDERA_URL", Help: "Feldera API base URL, e.g. http://localhost:8080",
		parse: func(c *Config, v string) error {
			if v == "" {
				return nil
			}
			u, err := url.Parse(v)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return badValue("FELDERA_URL", feldera.RedactURL(v), "an http:// or https:// URL with a host")
			}
			c.FelderaURL = v
			return nil
		}},
	{Env: "FELDERA_PIPELINE", Help: "Feldera pipeline name",
		parse: func(c *Config, v string) error { c.Pipeline = v; return nil }},
	{Env: "FELDERA_API_KEY", Help: "Feldera API key, sent as a Bearer token; never logged", Secret: true,
		parse: func(c *Config, v string) error { c.APIKey = v; return nil }},
	{Env: "FELDERA_ACK_MODE", Default: "completed", Help: "completed: ack after the completion token; accepted: ack on HTTP 200 (UNSAFE, demonstrates loss)",
		parse: func(c *Config, v string) error {
			if v != "completed" && v != "accepted" {
				return badValue("FELDERA_ACK_MODE", v, "completed or accepted")
			}
			c.AckMode = v
			return nil
		}},
	{Env: "FELDERA_REQUIRE_PRIMARY_KEY", Default: "true", Help: "refuse a Feldera table with no PRIMARY KEY (replays would duplicate rows)",
		parse: func(c *Config, v string) error {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return badValue("FELDERA_REQUIRE_PRIMARY_KEY", v, "true or false")
			}
			c.RequirePrimaryKey = b
			return nil
		}},
	{Env: "FELDERA_COMPLETION_TIMEOUT", Default: "60s", Help: "longest wait for a completion token; then the session ends as unavailable, nothing acked",
		parse: durationInto("FELDERA_COMPLETION_TIMEOUT", func(c *Config) *time.Duration { return &c.CompletionTimeout })},
	{Env: "FELDERA_COMMIT_STALL_TIMEOUT", Default: "5m", Help: "a Feldera transaction's commit takes as long as the views need: the wait for it ends the session only after Feldera showed no progress (commit_progress, records processed) for this long",
		parse: durationInto("FELDERA_COMMIT_STALL_TIMEOUT", func(c *Config) *time.Duration { return &c.CommitStallTimeout })},
	{Env: "FELDERA_INGRESS_FENCE", Default: "35s", Help: "after an ingress request got no clear answer, send nothing newer for this long (Feldera may still queue it)",
		parse: durationInto("FELDERA_INGRESS_FENCE", func(c *Config) *time.Duration { return &c.IngressFence })},
	{Env: "FELDERA_REQUEST_TIMEOUT", Default: "30s", Help: "longest wait for one answer from Feldera (an ingress request: the whole exchange); must be shorter than FELDERA_INGRESS_FENCE",
		parse: durationInto("FELDERA_REQUEST_TIMEOUT", func(c *Config) *time.Duration { return &c.RequestTimeout })},
	{Env: "FELDERA_CHECKPOINT_AFTER", Default: "30s", Help: "under at_least_once, ask Feldera for a checkpoint once completed work has waited this long for one (it is acknowledged only when a checkpoint covers it)",
		parse: durationInto("FELDERA_CHECKPOINT_AFTER", func(c *Config) *time.Duration { return &c.CheckpointAfter })},
	{Env: "FELDERA_CHECKPOINT_WAL", Default: "", Help: "under at_least_once, also ask Feldera for a checkpoint once completed work waiting for one holds this much WAL in the slot, so a fast writer cannot push the slot toward max_slot_wal_keep_size between checkpoints; plain bytes or with KiB/MiB/GiB, off to ask only by time (empty: a quarter of max_slot_wal_keep_size, of max_wal_size when it is 0, off when it is -1)",
		parse: func(c *Config, v string) error {
			switch v {
			case "":
				return nil
			case "off":
				c.CheckpointWAL = -1
				return nil
			}
			n, ok := parseBytes(v)
			if !ok || n < 64<<10 {
				return badValue("FELDERA_CHECKPOINT_WAL", v, "a size of at least 64KiB, such as 256MiB, or off")
			}
			c.CheckpointWAL = int64(n)
			return nil
		}},
	{Env: "STOP_TIMEOUT", Default: "20s", Help: "on SIGTERM/SIGINT, longest time to finish in-flight work before exiting 0 with nothing unfinished acknowledged",
		parse: durationInto("STOP_TIMEOUT", func(c *Config) *time.Duration { return &c.StopTimeout })},
	{Env: "BATCH_MAX_ROWS", Default: "10000", Help: "outbox flush size in rows: the memory bound",
		parse: func(c *Config, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 10_000_000 {
				return badValue("BATCH_MAX_ROWS", v, "an integer from 1 to 10000000")
			}
			c.BatchMaxRows = n
			return nil
		}},
	{Env: "SNAPSHOT_CHUNK_ROWS", Default: "", Help: "SNAPSHOT_MODE=incremental: rows per chunk, each read in its own short transaction and held in memory whole, two per lane, and also bounded by BATCH_MAX_BYTES (empty: 50000)",
		parse: func(c *Config, v string) error {
			if v == "" {
				return nil
			}
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 10_000_000 {
				return badValue("SNAPSHOT_CHUNK_ROWS", v, "an integer from 1 to 10000000")
			}
			c.SnapshotChunkRows = n
			return nil
		}},
	{Env: "SNAPSHOT_PARALLELISM", Default: "1", Help: "incremental snapshots and resnapshots: how many chunks of a table are read at once, each on its own connection, in ranges of the first key column cut at its pg_stats histogram (a table without statistics is one range)",
		parse: func(c *Config, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 64 {
				return badValue("SNAPSHOT_PARALLELISM", v, "an integer from 1 to 64")
			}
			c.SnapshotParallelism = n
			return nil
		}},
	{Env: "BATCH_MAX_BYTES", Default: "4MiB", Help: "outbox flush size in bytes of NDJSON (sealed after the row that reaches it): the memory bound for wide rows; plain bytes or with KiB/MiB/GiB",
		parse: func(c *Config, v string) error {
			n, ok := parseBytes(v)
			if !ok || n < 1024 || n > 1<<30 {
				return badValue("BATCH_MAX_BYTES", v, "a size from 1KiB to 1GiB, such as 16MiB or 4194304")
			}
			c.BatchMaxBytes = n
			return nil
		}},
	{Env: "BATCH_MAX_IN_FLIGHT", Default: "64", Help: "batches sent and not yet complete at once: POSTs go one at a time in commit order, only completion waits overlap (1 = wait for each batch before the next)",
		parse: func(c *Config, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 1024 {
				return badValue("BATCH_MAX_IN_FLIGHT", v, "an integer from 1 to 1024")
			}
			c.BatchMaxInFlight = n
			return nil
		}},
	{Env: "FELDERA_TRANSACTIONS", Default: "auto", Help: "auto: wrap a flush in a Feldera transaction when it holds several tables or part of a source transaction, so views never see half of one; always: every flush; off: none",
		parse: func(c *Config, v string) error {
			if v != "auto" && v != "always" && v != "off" {
				return badValue("FELDERA_TRANSACTIONS", v, "auto, always or off")
			}
			c.Transactions = v
			return nil
		}},
	{Env: "FELDERA_PROGRESS_TABLE", Default: "auto", Help: "exactly-once replays (docs/exactly-once-design.md): auto (default) uses the table pgfeldera_progress when the pipeline declares it (pgfeldera ddl prints it): every flush is a Feldera transaction that ends with this source's position, and a restart skips what Feldera holds instead of replaying it; on: require the table; off: ignore it (replays are at least once)",
		parse: func(c *Config, v string) error {
			if v != "auto" && v != "on" && v != "off" {
				return badValue("FELDERA_PROGRESS_TABLE", v, "auto, on or off")
			}
			c.ProgressTable = v
			return nil
		}},
	{Env: "SNAPSHOT_TRANSACTION", Default: "false", Help: "true: load the initial snapshot inside one Feldera transaction (views see no table until all are in, computed once; Feldera takes no checkpoint while it loads)",
		parse: func(c *Config, v string) error {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return badValue("SNAPSHOT_TRANSACTION", v, "true or false")
			}
			c.SnapshotTxn = b
			return nil
		}},
	{Env: "UNREPRESENTABLE_VALUES", Default: "refuse", Help: "a value Feldera cannot hold (infinity, a BC date, a year past 9999) in a DATE or TIMESTAMP column: refuse stops, naming the table, column and row key; null delivers NULL into a nullable column, logged and counted (pgfeldera_values_nulled_total)",
		parse: func(c *Config, v string) error {
			if v != "refuse" && v != "null" {
				return badValue("UNREPRESENTABLE_VALUES", v, "refuse or null")
			}
			c.NullUnrepresentable = v == "null"
			return nil
		}},
	{Env: "BATCH_LINGER_MS", Default: "50", Help: "flush deadline in ms from the oldest buffered row; 0 = one request per transaction",
		parse: func(c *Config, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > 3_600_000 {
				return badValue("BATCH_LINGER_MS", v, "an integer number of milliseconds from 0 to 3600000")
			}
			c.BatchLinger = time.Duration(n) * time.Millisecond
			return nil
		}},
	{Env: "SNAPSHOT_MODE", Default: "initial", Help: "initial: snapshot under the slot's exported snapshot; incremental: stream at once and read each table in chunks of SNAPSHOT_CHUNK_ROWS (block or primary-key ranges), resumable, no long-held snapshot; never: stream only; inconsistent: copy then slot (UNSAFE, demonstrates loss)",
		parse: func(c *Config, v string) error {
			if v != "initial" && v != "incremental" && v != "never" && v != "inconsistent" {
				return badValue("SNAPSHOT_MODE", v, "initial, incremental, never or inconsistent")
			}
			c.SnapshotMode = v
			return nil
		}},
	{Env: "STATE_FILE", Default: "pgfeldera.state.json", Help: "snapshot progress file (never the stream position)",
		parse: func(c *Config, v string) error {
			if v == "" {
				return badValue("STATE_FILE", v, "a file path")
			}
			c.StateFile = v
			return nil
		}},
	{Env: "NO_PROGRESS_TIMEOUT", Default: "5m", Help: "exit non-zero when nothing was acked for this long while work is pending",
		parse: durationInto("NO_PROGRESS_TIMEOUT", func(c *Config) *time.Duration { return &c.NoProgressTimeout })},
	{Env: "CRASH_AT", Help: "crash point (exit 70) for tests: " + strings.Join(crashtest.Points, ", "),
		parse: func(c *Config, v string) error {
			if v != "" && !crashtest.Valid(v) {
				return badValue("CRASH_AT", v, "one of "+strings.Join(crashtest.Points, ", "))
			}
			c.CrashAt = v
			return nil
		}},
	{Env: "CRASH_AFTER_BATCHES", Default: "1", Help: "crash on the n-th batch to pass CRASH_AT",
		parse: func(c *Config, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return badValue("CRASH_AFTER_BATCHES", v, "an integer of at least 1")
			}
			c.CrashAfterBatches = n
			return nil
		}},
	{Env: "HTTP_ADDR", Default: ":9187", Help: "listen address for /metrics, /healthz, /readyz; off disables",
		parse: func(c *Config, v string) error {
			// An empty variable reads as unset (the default), so the
			// server is turned off by a word.
			if v == "off" {
				v = ""
			}
			c.HTTPAddr = v
			return nil
		}},
	{Env: "LOG_LEVEL", Default: "info", Help: "debug, info, warn or error",
		parse: func(c *Config, v string) error {
			switch v {
			case "debug", "info", "warn", "error":
				c.LogLevel = v
				return nil
			}
			return badValue("LOG_LEVEL", v, "debug, info, warn or error")
		}},
	{Env: "LOG_FORMAT", Default: "text", Help: "text or json",
		parse: func(c *Config, v string) error {
			if v != "text" && v != "json" {
				return badValue("LOG_FORMAT", v, "text or json")
			}
			c.LogFormat = v
			return nil
		}},
}

// optional is parse for a setting whose empty value means "not set".
func optional(parse func(*Config, string) error) func(*Config, string) error {
	return func(c *Config, v string) error {
		if v == "" {
			return nil
		}
		return parse(c, v)
	}
}

func durationInto(env string, field func(*Config) *time.Duration) func(*Config, string) error {
	return func(c *Config, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return badValue(env, v, "a positive duration such as 500ms, 30s or 5m")
		}
		*field(c) = d
		return nil
	}
}

// parseConfig reads settings from flags (args) and the environment.
func parseConfig(name string, args []string, getenv func(string) string, stderr io.Writer) (*Config, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	vals := map[string]*string{}
	for _, s := range settings {
		vals[s.Env] = fs.String(s.Flag(), "", s.Help)
	}
	fs.Usage = func() { usage(stderr, name) }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, &ConfigError{Msg: err.Error()}
	}
	if fs.NArg() > 0 {
		return nil, &ConfigError{Msg: fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	value := func(s setting) (string, bool) {
		if set[s.Flag()] {
			return *vals[s.Env], true
		}
		if v, ok := lookup(getenv, s.Env); ok {
			return v, true
		}
		return s.Default, false
	}
	c := &Config{}
	given := map[string]string{}
	for _, s := range settings {
		v, explicit := value(s)
		if explicit {
			given[s.Env] = v
		}
		if s.parse != nil {
			if err := s.parse(c, v); err != nil {
				return nil, err
			}
		}
	}
	if err := c.resolve(given); err != nil {
		return nil, err
	}
	return c, nil
}

// lookup treats an empty variable as unset.
func lookup(getenv func(string) string, k string) (string, bool) {
	v := getenv(k)
	return v, v != ""
}

// resolve checks what involves several settings.
func (c *Config) resolve(given map[string]string) error {
	pgTable, felTable := given["PG_TABLE"], given["FELDERA_TABLE"]
	switch {
	case given["TABLES"] != "" && (pgTable != "" || felTable != ""):
		return &ConfigError{Msg: fmt.Sprintf("TABLES=%q and PG_TABLE/FELDERA_TABLE are both set: use TABLES alone, or the single-table shorthand alone", given["TABLES"])}
	case pgTable == "" && felTable != "":
		return badValue("FELDERA_TABLE", felTable, "needs PG_TABLE (the Postgres table to stream into it)")
	case pgTable != "":
		spec := pgTable
		if felTable != "" {
			spec += ":" + felTable
		}
		t, err := catalog.ParseTables(spec)
		if err != nil || len(t) != 1 {
			return badValue("PG_TABLE", pgTable, "one [schema.]table name")
		}
		c.Tables = t
	}
	var missing []string
	if c.DSN == "" {
		missing = append(missing, "PG_DSN")
	}
	if len(c.Tables) == 0 {
		missing = append(missing, "TABLES (or PG_TABLE)")
	}
	if c.FelderaURL == "" {
		missing = append(missing, "FELDERA_URL")
	}
	if c.Pipeline == "" {
		missing = append(missing, "FELDERA_PIPELINE")
	}
	if len(missing) > 0 {
		return &ConfigError{Msg: "missing required setting: " + strings.Join(missing, ", ")}
	}
	if err := validateDSN(c.DSN); err != nil {
		return err
	}
	// An ingress request is fenced from its last byte, and pgfeldera
	// waits for its answer at most FELDERA_REQUEST_TIMEOUT from its start;
	// Feldera holds a request no longer than its client does (or than the
	// manager's 30 s forward timeout). A fence no longer than the request
	// timeout could lift while the request may still be applied.
	if c.IngressFence <= c.RequestTimeout {
		return &ConfigError{Msg: fmt.Sprintf("FELDERA_INGRESS_FENCE=%s must be longer than FELDERA_REQUEST_TIMEOUT=%s: an ingress request may be applied for as long as pgfeldera waits for its answer, so a shorter fence could lift while it can still land",
			c.IngressFence, c.RequestTimeout)}
	}
	return nil
}

func usage(w io.Writer, name string) {
	fmt.Fprintf(w, "usage: pgfeldera %s [flags]\n\nEvery setting is an environment variable and a flag (the flag wins).\n\n", name)
	fmt.Fprintf(w, "  %-28s %-32s %-22s %s\n", "VARIABLE", "FLAG", "DEFAULT", "MEANING")
	for _, s := range settings {
		def := s.Default
		if def == "" {
			def = "-"
		}
		fmt.Fprintf(w, "  %-28s %-32s %-22s %s\n", s.Env, "-"+s.Flag(), def, s.Help)
	}
}
