package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfeldera/pgfeldera/catalog"
	"github.com/pgfeldera/pgfeldera/connector"
	"github.com/pgfeldera/pgfeldera/delivery"
	"github.com/pgfeldera/pgfeldera/failover"
	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/metrics"
	"github.com/pgfeldera/pgfeldera/setup"
	"github.com/pgfeldera/pgfeldera/state"
)

// Status is what `pgfeldera status` reports.
type Status struct {
	Slot struct {
		Name              string  `json:"name"`
		Exists            bool    `json:"exists"`
		Active            bool    `json:"active"`
		ActivePid         *int32  `json:"active_pid"`
		ConfirmedFlushLSN *string `json:"confirmed_flush_lsn"`
		RestartLSN        *string `json:"restart_lsn"`
		RetainedWALBytes  *int64  `json:"retained_wal_bytes"`
		WalStatus         *string `json:"wal_status"`
		SafeWALSize       *int64  `json:"safe_wal_size"`
		// Failover is whether the slot is synchronized to a standby and
		// survives a failover (PostgreSQL 17+; null before);
		// SynchronizedStandbySlots is the primary's setting, which keeps
		// Feldera from holding rows the standby never had (null before 17).
		Failover                 *bool   `json:"failover"`
		SynchronizedStandbySlots *string `json:"synchronized_standby_slots"`
		FailoverNote             string  `json:"failover_note,omitempty"`
	} `json:"slot"`
	State struct {
		File   string        `json:"file"`
		Error  string        `json:"error,omitempty"`
		Tables []state.Table `json:"tables,omitempty"`
		// Requests are the resnapshot requests the connector took.
		Requests []state.Request `json:"requests,omitempty"`
		// Fence is the ingress fence file: a process running (or one that
		// died), and a deadline before which nothing is sent.
		Fence *state.Fence `json:"fence,omitempty"`
	} `json:"state"`
	Feldera struct {
		Pipeline         string `json:"pipeline"`
		DeploymentStatus string `json:"deployment_status,omitempty"`
		DeploymentID     string `json:"deployment_id,omitempty"`
		// Model is the pipeline's fault-tolerance model and AckGate when
		// pgfeldera acknowledges under it ("complete" or "checkpoint").
		Model   string `json:"fault_tolerance,omitempty"`
		AckGate string `json:"ack_gate,omitempty"`
		Error   string `json:"error,omitempty"`
	} `json:"feldera"`
	// Postgres is the server's WAL level: whether it decodes logically,
	// and why (PostgreSQL 19 decodes under wal_level = replica while a
	// logical slot exists).
	Postgres struct {
		setup.WALLevel
		Note string `json:"note,omitempty"`
	} `json:"postgres"`
	Tables []TableStatus `json:"tables"`
	// Stages are the running process's times from a source transaction's
	// commit to each stage (pgfeldera_stage_seconds, read from HTTP_ADDR's
	// /metrics); StagesError says why there are none.
	Stages      []metrics.StageTimes `json:"stages,omitempty"`
	StagesError string               `json:"stages_error,omitempty"`
	// Standbys are the other servers PG_DSN lists that are in recovery,
	// and whether each holds a usable copy of the slot (PostgreSQL 17+).
	Standbys []StandbyStatus `json:"standbys,omitempty"`
}

// StandbyStatus is one standby's copy of the slot.
type StandbyStatus = failover.StandbySlot

// TableStatus compares one mapped table's row counts.
type TableStatus struct {
	Source       string `json:"source"`
	Dest         string `json:"dest"`
	PostgresRows *int64 `json:"postgres_rows"`
	FelderaRows  *int64 `json:"feldera_rows"`
	Error        string `json:"error,omitempty"`
}

func runStatus(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	asJSON, rest := jsonFlag(args)
	cfg, err := parseConfig("status", rest, getenv, stderr)
	if code, done := configResult(err, stderr); done {
		return code
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := collectStatus(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "pgfeldera status:", err)
		return exitFatal
	}
	output(stdout, asJSON, st, func() { printStatus(stdout, st) })
	if !st.Slot.Exists || (st.Slot.WalStatus != nil && *st.Slot.WalStatus == "lost") {
		fmt.Fprintf(stderr, "pgfeldera status: slot %s is missing or lost: the next run resnapshots\n", cfg.Slot)
		return exitFatal
	}
	return exitOK
}

// jsonFlag takes --json out of a subcommand's arguments.
func jsonFlag(args []string) (asJSON bool, rest []string) {
	for _, a := range args {
		if a == "--json" || a == "-json" {
			asJSON = true
			continue
		}
		rest = append(rest, a)
	}
	return asJSON, rest
}

// output writes v as indented JSON for machines, or calls print.
func output(w io.Writer, asJSON bool, v any, print func()) {
	if !asJSON {
		print()
		return
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func collectStatus(ctx context.Context, cfg *Config) (*Status, error) {
	st := &Status{}
	conn, err := pgx.Connect(ctx, cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("connect to postgres %s: %w", redactDSN(cfg.DSN), err)
	}
	defer conn.Close(context.Background())
	if err := collectSlot(ctx, conn, cfg, st); err != nil {
		return nil, err
	}
	st.Standbys = failover.StandbySlots(ctx, cfg.DSN, cfg.Slot)
	collectState(cfg, st)
	st.Feldera.Pipeline = cfg.Pipeline
	client, err := feldera.New(feldera.Config{URL: cfg.FelderaURL, Pipeline: cfg.Pipeline, APIKey: cfg.APIKey, RetryMax: -1, RequestTimeout: 10 * time.Second})
	if err != nil {
		return nil, err
	}
	collectFeldera(ctx, client, cfg, st)
	for _, t := range cfg.Tables {
		st.Tables = append(st.Tables, tableStatus(ctx, conn, client, cfg.Publication, t))
	}
	readStages(ctx, st, cfg.HTTPAddr)
	return st, nil
}

// collectSlot reads the slot, the WAL level and the failover setting from
// Postgres; a failed read fails the status, as the slot is what it is about.
func collectSlot(ctx context.Context, conn *pgx.Conn, cfg *Config, st *Status) error {
	s := &st.Slot
	s.Name = cfg.Slot
	// failover and synced exist from PostgreSQL 17 (NULL before).
	err := conn.QueryRow(ctx, `SELECT active, active_pid, confirmed_flush_lsn::text, restart_lsn::text,
		pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::int8, wal_status, safe_wal_size,
		(to_jsonb(s) ->> 'failover')::bool
		FROM pg_replication_slots s WHERE slot_name = $1`, cfg.Slot).
		Scan(&s.Active, &s.ActivePid, &s.ConfirmedFlushLSN, &s.RestartLSN, &s.RetainedWALBytes, &s.WalStatus, &s.SafeWALSize, &s.Failover)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return fmt.Errorf("read slot: %w", err)
	default:
		s.Exists = true
	}
	wl, err := setup.ReadWALLevel(ctx, conn, cfg.Slot)
	if err != nil {
		return err
	}
	st.Postgres.WALLevel = wl
	if note, _, err := wl.Check(); err != nil {
		st.Postgres.Note = err.Error()
	} else {
		st.Postgres.Note = note
	}
	var standbySlots *string
	if err := conn.QueryRow(ctx, "SELECT current_setting('synchronized_standby_slots', true)").Scan(&standbySlots); err != nil {
		return fmt.Errorf("read synchronized_standby_slots: %w", err)
	}
	s.SynchronizedStandbySlots = standbySlots
	s.Failover = failoverNote(s.Failover, standbySlots, &s.FailoverNote)
	return nil
}

// collectState reads the state and fence files; an unreadable state file is
// reported in the status, not fatal, since status is how one looks into it.
func collectState(cfg *Config, st *Status) {
	st.State.File = cfg.StateFile
	if ls, err := state.Load(cfg.StateFile); err == nil {
		st.State.Tables, st.State.Requests = ls.Tables, ls.Requests
	} else {
		st.State.Error = err.Error()
	}
	if f, err := state.LoadFence(state.FencePath(cfg.StateFile)); err == nil {
		st.State.Fence = f
	}
}

// collectFeldera reads the pipeline's deployment and fault-tolerance model;
// an unreachable Feldera is reported in the status, not fatal.
func collectFeldera(ctx context.Context, client *feldera.Client, cfg *Config, st *Status) {
	if p, err := client.Pipeline(ctx); err != nil {
		st.Feldera.Error = err.Error()
	} else {
		st.Feldera.DeploymentStatus = p.DeploymentStatus
		if p.DeploymentID != nil {
			st.Feldera.DeploymentID = *p.DeploymentID
		}
		if m, err := p.FaultToleranceModel(); err != nil {
			st.Feldera.Error = err.Error()
		} else {
			st.Feldera.Model, st.Feldera.AckGate = string(m), delivery.GateFor(m, cfg.AckMode == connector.AckAccepted).String()
		}
	}
}

// tableStatus counts one table's rows on both sides; a failed count is the
// row's error, so one table does not hide the others.
func tableStatus(ctx context.Context, conn *pgx.Conn, client *feldera.Client, publication string, t catalog.Table) TableStatus {
	ts := TableStatus{Source: t.Schema + "." + t.Name, Dest: t.Dest}
	var n int64
	// A publication row filter: Feldera holds only the rows it passes.
	var filter *string
	_ = conn.QueryRow(ctx, "SELECT rowfilter FROM pg_publication_tables WHERE pubname = $1 AND schemaname = $2 AND tablename = $3",
		publication, t.Schema, t.Name).Scan(&filter)
	count := "SELECT count(*) FROM " + t.Source()
	if filter != nil && *filter != "" {
		count += " WHERE " + *filter
	}
	if err := conn.QueryRow(ctx, count).Scan(&n); err == nil {
		ts.PostgresRows = &n
	} else {
		ts.Error = err.Error()
	}
	var f int64 = -1
	err := client.Query(ctx, "SELECT COUNT(*) FROM "+feldera.SQLIdent(t.Dest), func(row json.RawMessage) error {
		var m map[string]int64
		if err := json.Unmarshal(row, &m); err != nil {
			return err
		}
		for _, v := range m {
			f = v
		}
		return nil
	})
	if err == nil && f >= 0 {
		ts.FelderaRows = &f
	} else if err != nil {
		ts.Error = strings.TrimSpace(ts.Error + " " + err.Error())
	}
	return ts
}

func printStatus(w io.Writer, st *Status) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	printSlot(tw, st)
	printStages(tw, st)
	printState(tw, st)
	fmt.Fprintf(tw, "feldera\t%s\t%s %s fault_tolerance=%s ack_gate=%s %s\n", st.Feldera.Pipeline, st.Feldera.DeploymentStatus, st.Feldera.DeploymentID, st.Feldera.Model, st.Feldera.AckGate, st.Feldera.Error)
	fmt.Fprintf(tw, "table\tpostgres rows\tfeldera rows\n")
	for _, t := range st.Tables {
		fmt.Fprintf(tw, "%s → %s\t%s\t%s\t%s\n", t.Source, t.Dest, numOrDash(t.PostgresRows), numOrDash(t.FelderaRows), t.Error)
	}
	tw.Flush()
}

// strOrDash prints a text that may be unknown (NULL, unread) as "-", so
// the status columns stay aligned.
func strOrDash(p *string) string {
	if p == nil {
		return "-"
	}
	return *p
}

// numOrDash prints a number that may be unknown (NULL, unread) as "-", so
// the status columns stay aligned.
func numOrDash(p *int64) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprint(*p)
}

// printSlot prints the WAL level, the slot and the standbys' copies of it:
// what decides whether the next run resumes or resnapshots.
func printSlot(tw io.Writer, st *Status) {
	s := st.Slot
	pg := st.Postgres
	level := "wal_level=" + pg.Setting
	if pg.Effective != "" {
		level += " effective_wal_level=" + pg.Effective
	}
	fmt.Fprintf(tw, "postgres\t%s\t%s\n", level, pg.Note)
	fmt.Fprintf(tw, "slot\t%s\texists=%v active=%v\n", s.Name, s.Exists, s.Active)
	if s.Failover != nil || s.SynchronizedStandbySlots != nil {
		fo := "-"
		if s.Failover != nil {
			fo = fmt.Sprint(*s.Failover)
		}
		fmt.Fprintf(tw, "\tfailover=%s synchronized_standby_slots=%q\t%s\n", fo, strOrDash(s.SynchronizedStandbySlots), s.FailoverNote)
	}
	fmt.Fprintf(tw, "\tconfirmed_flush_lsn\t%s\n\trestart_lsn\t%s\n\tretained WAL bytes\t%s\n\twal_status\t%s\n",
		strOrDash(s.ConfirmedFlushLSN), strOrDash(s.RestartLSN), numOrDash(s.RetainedWALBytes), strOrDash(s.WalStatus))
	for _, sb := range st.Standbys {
		line := "not in recovery"
		switch {
		case sb.Error != "":
			line = "unreachable: " + sb.Error
		case sb.InRecovery && sb.SlotSynced != nil && *sb.SlotSynced:
			line = "standby; its copy of the slot is synced: usable after a promotion"
		case sb.InRecovery:
			line = "standby; its copy of the slot is NOT ready: a failover now would resnapshot"
		}
		fmt.Fprintf(tw, "\tserver %s\t%s\n", sb.Host, line)
	}
}

// printState prints the state file's tables, resnapshot requests and fence:
// what the connector will do on its next start.
func printState(tw io.Writer, st *Status) {
	fmt.Fprintf(tw, "state\t%s\t%s\n", st.State.File, st.State.Error)
	for _, t := range st.State.Tables {
		fmt.Fprintf(tw, "\t%s → %s\t%s\n", t.Source, t.Dest, stateTableLine(t))
	}
	for _, r := range st.State.Requests {
		line := "under way"
		switch {
		case r.Refused != "":
			line = "refused: " + r.Refused
		case r.Done:
			line = "done"
		}
		fmt.Fprintf(tw, "\tresnapshot %s\t%s: %s\n", r.ID, strings.Join(r.Tables, ", "), line)
	}
	if f := st.State.Fence; f != nil {
		line := "no process running"
		if f.Running {
			line = fmt.Sprintf("running as pid %d (or died without stopping: the next start fences ingress in full)", f.PID)
		}
		if wait := time.Until(f.Until); wait > 0 {
			line += fmt.Sprintf("; ingress fenced for %s more", wait.Round(time.Second))
		}
		fmt.Fprintf(tw, "\tfence\t%s\n", line)
		if p := f.Partial; p != nil {
			fmt.Fprintf(tw, "\tpartial commit\tFeldera transaction %d at %s held part of a source transaction (views saw a prefix): %s\n", p.TransactionID, p.At.Format(time.RFC3339), p.Why)
		}
	}
}

// stateTableLine says where one table's snapshot stands, with the resume
// point of an incremental one, so an interrupted snapshot can be followed.
func stateTableLine(t state.Table) string {
	line := t.Status
	if t.Status == state.Incremental && t.Retract {
		line += fmt.Sprintf(": resnapshot %s, retracting the rows Feldera holds and Postgres lacks (then the chunks)", t.Request)
	} else if t.Status == state.Incremental {
		// A resumable snapshot: where it stands.
		line += fmt.Sprintf(": %d chunks, %d rows copied, durable in Feldera", t.Chunks, t.Copied)
		if t.Request != "" {
			line += " (resnapshot " + t.Request + ")"
		}
		switch {
		case t.Blocks != nil && len(t.Lanes) > 0:
			var at []string
			for _, l := range t.Lanes {
				next := "done"
				if !l.Done {
					next = deref(l.Lo)
					if len(l.After) > 0 {
						next = l.After[0]
					}
				}
				at = append(at, fmt.Sprintf("[%s, %s) at %s", deref(l.Lo), deref(l.Hi), next))
			}
			line += fmt.Sprintf("; read in block ranges of %d blocks, lanes %s", t.Blocks.End, strings.Join(at, ", "))
		case t.Blocks != nil:
			next := "0"
			if len(t.After) > 0 {
				next = t.After[0]
			}
			line += fmt.Sprintf("; read in block ranges, resumes at block %s of %d", next, t.Blocks.End)
		case len(t.After) > 0:
			line += fmt.Sprintf("; resumes after key (%s)", strings.Join(t.After, ", "))
		}
	}
	return line
}

// failoverNote says what a slot's failover setting means for a failover.
func failoverNote(failover *bool, standbySlots *string, note *string) *bool {
	switch {
	case failover == nil && standbySlots == nil:
	case failover != nil && !*failover:
		*note = "the slot has no failover: it is lost with the primary, and a failover resnapshots every table (PG_SLOT_FAILOVER)"
	case standbySlots == nil || *standbySlots == "":
		*note = "synchronized_standby_slots is empty: after a failover Feldera may hold rows the new primary never had (docs/operations.md, Failover)"
	case failover != nil:
		*note = "the slot fails over; the primary waits for " + *standbySlots + " before sending"
	}
	return failover
}

func deref(s *string) string {
	if s == nil {
		return "?"
	}
	return *s
}

// readStages fills the stage times from the process serving HTTP_ADDR, if
// one does.
func readStages(ctx context.Context, st *Status, addr string) {
	url, ok := metricsURL(addr)
	if !ok {
		st.StagesError = "HTTP_ADDR is empty: no metrics to read"
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	stages, err := metrics.ReadStages(ctx, url)
	if err != nil {
		st.StagesError = "no running pgfeldera at " + url + ": " + err.Error()
		return
	}
	st.Stages = stages
}

// metricsURL is where a pgfeldera serving HTTP_ADDR on this host answers:
// a listen address without a host, or with an unspecified one, is reached
// on loopback.
func metricsURL(addr string) (string, bool) {
	if addr == "" {
		return "", false
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", false
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/metrics", true
}

func printStages(tw io.Writer, st *Status) {
	if st.StagesError != "" {
		fmt.Fprintf(tw, "stages\t%s\n", st.StagesError)
		return
	}
	fmt.Fprintf(tw, "stages\ttime from a source commit, this process\n")
	for _, s := range st.Stages {
		if s.Count == 0 {
			fmt.Fprintf(tw, "\t%s\tno transaction yet\n", s.Stage)
			continue
		}
		fmt.Fprintf(tw, "\t%s\tmean %.3fs, p50 <= %gs, p99 <= %gs (%d transactions)\n", s.Stage, s.Mean, s.P50, s.P99, s.Count)
	}
}
