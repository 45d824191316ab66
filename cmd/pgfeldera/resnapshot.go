package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/incremental"
	"github.com/pgfeldera/pgfeldera/state"
)

const resnapshotUsage = `usage: pgfeldera resnapshot [--wait] [--timeout DURATION] TABLE... [settings of run]

Asks the running connector (the one streaming from PG_SLOT) to copy TABLE
again while it keeps streaming everything else: it deletes the rows Feldera
holds for the table that Postgres no longer has, then reads the table in
chunks, as SNAPSHOT_MODE=incremental does. The request is a logical message
in the stream (pg_logical_emit_message), so it is ordered with the data; it
is taken once, even if the stream is replayed.

TABLE is a Postgres table as the state file names it (schema.table, or a
table of schema public), or a Feldera table (then every table mapped to it).
Run it with the environment of pgfeldera run (PG_DSN, PG_SLOT, STATE_FILE).

  --wait              wait until the tables are exact in Feldera again (exit 0),
                      or the connector refused the request (exit 1)
  --timeout DURATION  with --wait, give up after DURATION (exit 1); default: never

exit codes: 0 request written (with --wait: done), 2 configuration error
(an unknown table), 1 any other error
`

// resnapshotArgs takes the command's own flags and its TABLE arguments
// out of args; the rest are settings flags (each takes a value).
func resnapshotArgs(args []string) (wait bool, timeout time.Duration, tables, rest []string, err error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch {
		case !strings.HasPrefix(a, "-"):
			tables = append(tables, a)
		case name == "wait":
			wait = true
			if hasVal {
				if wait, err = strconv.ParseBool(val); err != nil {
					return false, 0, nil, nil, &ConfigError{Msg: fmt.Sprintf("--wait=%q: want true or false", val)}
				}
			}
		case name == "timeout":
			if !hasVal {
				if i+1 >= len(args) {
					return false, 0, nil, nil, &ConfigError{Msg: "--timeout needs a duration"}
				}
				i++
				val = args[i]
			}
			if timeout, err = time.ParseDuration(val); err != nil || timeout <= 0 {
				return false, 0, nil, nil, &ConfigError{Msg: fmt.Sprintf("--timeout=%q: want a positive duration such as 10m", val)}
			}
		case name == "h" || name == "help":
			return false, 0, nil, nil, errHelpResnapshot
		default:
			rest = append(rest, a)
			if !hasVal && i+1 < len(args) {
				i++
				rest = append(rest, args[i])
			}
		}
	}
	return wait, timeout, tables, rest, nil
}

var errHelpResnapshot = errors.New("help")

// resolveTables maps the command's TABLE arguments to the state file's
// sources.
func resolveTables(st *state.State, names []string) ([]string, error) {
	var out []string
	var known []string
	for _, t := range st.Tables {
		known = append(known, t.Source)
	}
	for _, n := range names {
		var hit []string
		for _, t := range st.Tables {
			if t.Source == n || (!strings.Contains(n, ".") && t.Source == "public."+n) {
				hit = append(hit, t.Source)
			}
		}
		if len(hit) == 0 {
			for _, t := range st.Tables {
				if t.Dest == feldera.Canonical(n, false) || t.Dest == n {
					hit = append(hit, t.Source)
				}
			}
		}
		if len(hit) == 0 {
			return nil, &ConfigError{Msg: fmt.Sprintf("table %q is not one the connector streams (the state file lists %s)", n, strings.Join(known, ", "))}
		}
		for _, h := range hit {
			if !slices.Contains(out, h) {
				out = append(out, h)
			}
		}
	}
	return out, nil
}

func runResnapshot(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	wait, timeout, names, rest, err := resnapshotArgs(args)
	if errors.Is(err, errHelpResnapshot) {
		fmt.Fprint(stdout, resnapshotUsage)
		return exitOK
	}
	if err == nil && len(names) == 0 {
		err = &ConfigError{Msg: "name at least one TABLE to resnapshot"}
	}
	if err != nil {
		fmt.Fprintln(stderr, "pgfeldera resnapshot: configuration error:", err)
		fmt.Fprint(stderr, "\n"+resnapshotUsage)
		return exitConfig
	}
	cfg, err := parseConfig("resnapshot", rest, getenv, stderr)
	if code, done := configResult(err, stderr); done {
		return code
	}
	st, err := state.Load(cfg.StateFile)
	if errors.Is(err, state.ErrNotExist) {
		fmt.Fprintf(stderr, "pgfeldera resnapshot: there is no state file at %s: the connector has not copied anything yet (a first `pgfeldera run` snapshots every table)\n", cfg.StateFile)
		return exitFatal
	}
	if err != nil {
		fmt.Fprintln(stderr, "pgfeldera resnapshot:", err)
		return exitFatal
	}
	if st.Slot != cfg.Slot {
		fmt.Fprintf(stderr, "pgfeldera resnapshot: configuration error: the state file %s belongs to slot %s, PG_SLOT is %s\n", cfg.StateFile, st.Slot, cfg.Slot)
		return exitConfig
	}
	tables, err := resolveTables(st, names)
	if err != nil {
		fmt.Fprintln(stderr, "pgfeldera resnapshot: configuration error:", err)
		return exitConfig
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	lsn, err := writeRequest(ctx, cfg.DSN, cfg.Slot, id, tables)
	if err != nil {
		fmt.Fprintln(stderr, "pgfeldera resnapshot:", err)
		return exitFatal
	}
	fmt.Fprintf(stdout, "resnapshot: request %s for %s written to the stream at %s (slot %s)\n", id, strings.Join(tables, ", "), lsn, cfg.Slot)
	if !wait {
		return exitOK
	}
	return waitRequest(ctx, cfg.StateFile, cfg.Slot, id, timeout, stdout, stderr)
}

// writeRequest emits the request as a transactional logical message.
func writeRequest(ctx context.Context, dsn, slot, id string, tables []string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "", fmt.Errorf("connect to Postgres: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	prefix, content := incremental.ResnapshotMessage(slot, id, tables)
	var lsn string
	if err := conn.QueryRow(ctx, "SELECT pg_logical_emit_message(true, $1, $2::text)::text", prefix, content).Scan(&lsn); err != nil {
		return "", fmt.Errorf("write the request (pg_logical_emit_message): %w", err)
	}
	return lsn, nil
}

// waitRequest polls the state file until the connector marks the request
// done or refused.
func waitRequest(ctx context.Context, stateFile, slot, id string, timeout time.Duration, stdout, stderr io.Writer) int {
	start := time.Now()
	var deadline <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		deadline = t.C
	}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	lastSay := time.Now()
	for {
		st, err := state.Load(stateFile)
		if err != nil && !errors.Is(err, state.ErrNotExist) {
			fmt.Fprintln(stderr, "pgfeldera resnapshot:", err)
			return exitFatal
		}
		var r *state.Request
		if st != nil {
			r = st.Request(id)
		}
		switch {
		case r != nil && r.Refused != "":
			fmt.Fprintf(stderr, "pgfeldera resnapshot: the connector refused request %s: %s\n", id, r.Refused)
			return exitFatal
		case r != nil && r.Done:
			fmt.Fprintf(stdout, "resnapshot: request %s done after %s: %s exact in Feldera again\n", id, time.Since(start).Round(time.Millisecond), strings.Join(r.Tables, ", "))
			return exitOK
		}
		if time.Since(lastSay) >= 10*time.Second {
			lastSay = time.Now()
			if r == nil {
				fmt.Fprintf(stdout, "resnapshot: waiting for the connector on slot %s to take request %s (is pgfeldera run running?)\n", slot, id)
			} else {
				for _, t := range st.Tables {
					if t.Request == id && t.Status == state.Incremental {
						phase := "copying"
						if t.Retract {
							phase = "retracting"
						}
						fmt.Fprintf(stdout, "resnapshot: %s: %s, %d chunks, %d rows copied\n", t.Source, phase, t.Chunks, t.Copied)
					}
				}
			}
		}
		select {
		case <-ctx.Done():
			fmt.Fprintf(stderr, "pgfeldera resnapshot: interrupted; request %s stays in the stream and the connector carries it out\n", id)
			return exitFatal
		case <-deadline:
			fmt.Fprintf(stderr, "pgfeldera resnapshot: request %s not done after %s; it stays in the stream and the connector carries it out\n", id, timeout)
			return exitFatal
		case <-tick.C:
		}
	}
}
