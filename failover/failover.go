package failover

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfeldera/pgfeldera/decode/pgvalue"
	"github.com/pgfeldera/pgfeldera/internal/fatal"
	"github.com/pgfeldera/pgfeldera/replconn"
	"github.com/pgfeldera/pgfeldera/state"
)

// Slot failover settings (PG_SLOT_FAILOVER).
const (
	Auto = "auto" // on when the server is 17+
	On   = "on"   // refuse a server below 17
	Off  = "off"
)

// Checker checks, on the replication connection of a session, what
// failover needs and whether the server is the one the tables came from.
type Checker struct {
	DSN, Slot string
	Setting   string // PG_SLOT_FAILOVER
	// First says no session ran yet in this process: PG_SLOT_FAILOVER=on
	// then refuses an empty synchronized_standby_slots.
	First  bool
	Logger *slog.Logger
}

// minFailoverVersion is the first major version with failover slots.
const minFailoverVersion = 17

// Server is what a session learned of the Server it reached.
type Server struct {
	Major    int
	SystemID string
	Database string // the database the session reads (IDENTIFY_SYSTEM's dbname)
	Timeline int32
	Failover bool // slots are created with FAILOVER, and converted
	// WALEnd is IDENTIFY_SYSTEM's xlogpos: the server's WAL flush
	// position when the session began (see idleKeepalive).
	WALEnd pglogrepl.LSN
}

// Identify reads the server's version, system identifier and timeline on
// the replication connection, and whether its slots fail over under
// setting (PG_SLOT_FAILOVER).
func Identify(ctx context.Context, conn *pgconn.PgConn, setting string) (Server, error) {
	var srv Server
	major, err := replconn.ServerMajor(conn.ParameterStatus("server_version"))
	if err != nil {
		return srv, err
	}
	srv.Major = major
	id, err := pglogrepl.IdentifySystem(ctx, conn)
	if err != nil {
		return srv, fmt.Errorf("IDENTIFY_SYSTEM: %w", err)
	}
	srv.SystemID, srv.Database, srv.Timeline, srv.WALEnd = id.SystemID, id.DBName, id.Timeline, id.XLogPos
	switch setting {
	case On:
		if major < minFailoverVersion {
			return srv, fatal.Wrap(fmt.Errorf("PG_SLOT_FAILOVER=on: PostgreSQL %d has no failover slots (17 or later does); set PG_SLOT_FAILOVER=off or auto", major))
		}
		srv.Failover = true
	case Off:
	default:
		srv.Failover = major >= minFailoverVersion
	}
	return srv, nil
}

// Preflight checks, on a server with failover slots, what failover needs
// on the primary, logs what is missing, and converts the slot to failover
// when it exists without it and no walsender holds it.
func (c *Checker) Preflight(ctx context.Context, conn *pgconn.PgConn, srv Server) error {
	if srv.Major < minFailoverVersion {
		return nil
	}
	if err := c.convertSlot(ctx, conn, srv); err != nil {
		return err
	}
	if !srv.Failover {
		return nil
	}
	listed, err := c.standbySlots(ctx, conn)
	if err != nil || listed == "" {
		return err
	}
	c.Logger.Info("failover: slots fail over; the primary waits for the standby slots before sending", "synchronized_standby_slots", listed)
	for _, sb := range StandbySlots(ctx, c.DSN, c.Slot) {
		switch {
		case sb.Error != "":
			c.Logger.Warn("failover: a server PG_DSN lists cannot be checked", "server", sb.Host, "err", sb.Error)
		case sb.SlotSynced != nil && *sb.SlotSynced:
			c.Logger.Info("failover: the standby holds a synced copy of the slot, usable after a promotion", "server", sb.Host)
		default:
			c.Logger.Warn("failover: the standby's copy of the slot is not ready (synced, not temporary): a failover now would resnapshot", "server", sb.Host)
		}
	}
	return nil
}

// convertSlot gives an existing slot failover when the server should fail
// it over and no walsender holds it; otherwise it says what is missing.
func (c *Checker) convertSlot(ctx context.Context, conn *pgconn.PgConn, srv Server) error {
	slot, err := replconn.ReadFailoverSlot(ctx, conn, c.Slot)
	if err != nil || !slot.Exists {
		return err
	}
	failover, active := slot.Failover, slot.Active
	switch {
	case failover || !srv.Failover:
		if !failover {
			c.Logger.Warn("failover: slot "+c.Slot+" has no failover (PG_SLOT_FAILOVER=off): it is lost with the primary, and a failover resnapshots every table", "slot", c.Slot)
		}
	case active:
		c.Logger.Warn("failover: slot "+c.Slot+" was created without failover, and a walsender holds it, so it is not converted now: it would be lost with the primary", "slot", c.Slot)
	default:
		if _, err := conn.Exec(ctx, "ALTER_REPLICATION_SLOT "+pgvalue.QuoteIdent(c.Slot)+" ( FAILOVER true )").ReadAll(); err != nil {
			return fmt.Errorf("failover: convert slot %s to failover: %w", c.Slot, err)
		}
		c.Logger.Info("failover: slot "+c.Slot+" was created without failover; converted (ALTER_REPLICATION_SLOT ... FAILOVER true)", "slot", c.Slot)
	}
	return nil
}

// standbySlots reads synchronized_standby_slots and says what is wrong
// with it: empty (the phantom-row window: refused with PG_SLOT_FAILOVER=on
// at the first session, warned otherwise) or listing slots that are
// missing, not physical or not active. It returns the list.
func (c *Checker) standbySlots(ctx context.Context, conn *pgconn.PgConn) (string, error) {
	res, err := conn.Exec(ctx, "SHOW synchronized_standby_slots").ReadAll()
	if err != nil {
		return "", fmt.Errorf("read synchronized_standby_slots: %w", err)
	}
	listed := ""
	if len(res) == 1 && len(res[0].Rows) == 1 {
		listed = strings.TrimSpace(string(res[0].Rows[0][0]))
	}
	if listed == "" {
		err := fmt.Errorf("synchronized_standby_slots is empty on the primary: pgfeldera can receive (and send Feldera) transactions no standby has yet, and after a failover Feldera would hold rows the new primary never had (phantom rows); list the standby's physical slot there (docs/operations.md, Failover)")
		// PG_SLOT_FAILOVER=on refuses to start so; a session after a
		// failover (the promoted server has no standby yet) only warns:
		// stopping the stream would turn one failure into an outage.
		if c.Setting == On && c.First {
			return "", fatal.Wrap(fmt.Errorf("PG_SLOT_FAILOVER=on: %w", err))
		}
		c.Logger.Warn("failover: PHANTOM-ROW WINDOW: " + err.Error())
		return "", nil
	}
	for _, name := range strings.Split(listed, ",") {
		name = strings.TrimSpace(name)
		sb, err := replconn.ReadSlot(ctx, conn, name)
		if err != nil {
			return "", err
		}
		switch {
		case !sb.Exists:
			c.Logger.Warn("failover: synchronized_standby_slots lists "+name+", which does not exist: the primary holds logical decoding back until it does", "slot", name)
		case !sb.Physical:
			c.Logger.Warn("failover: synchronized_standby_slots lists "+name+", which is not a physical slot", "slot", name)
		case sb.ActivePID == 0:
			c.Logger.Warn("failover: the standby slot "+name+" is not active: no standby streams from it, and the primary holds logical decoding back until one does", "slot", name)
		}
	}
	return listed, nil
}

// Diverged says why the state's tables cannot be trusted on this server
// ("" when they can): another cluster, or a new timeline that forked
// before something Feldera holds. acked is what this process
// acknowledged, sentHigh the highest WAL position of a change it sent,
// progress the progress row as the old history left it (0: none): the
// end of the last source transaction Feldera holds.
func (c *Checker) Diverged(ctx context.Context, conn *pgconn.PgConn, st *state.State, srv Server, acked, sentHigh, progress pglogrepl.LSN) (string, error) {
	if st == nil || st.SystemID == "" {
		return "", nil
	}
	if st.SystemID != srv.SystemID {
		return fmt.Sprintf("the server is another cluster (system identifier %s; the tables were copied from %s)", srv.SystemID, st.SystemID), nil
	}
	if st.Timeline == 0 || srv.Timeline == st.Timeline {
		return "", nil
	}
	if srv.Timeline < st.Timeline {
		return fmt.Sprintf("the server is on timeline %d, older than %d the tables were streamed on", srv.Timeline, st.Timeline), nil
	}
	fork, err := replconn.ForkPoint(ctx, conn, srv.Timeline, st.Timeline)
	if err != nil {
		return "", err
	}
	// The slot on the new timeline must be the synchronized copy: a
	// failover slot, not ahead of what this process acknowledged. (A
	// missing slot is the resnapshot path anyway.)
	slot, err := replconn.ReadFailoverSlot(ctx, conn, c.Slot)
	if err != nil {
		return "", err
	}
	if slot.Exists {
		if !slot.Failover {
			return fmt.Sprintf("a failover to timeline %d, and slot %s there is not a failover slot (not the synchronized copy)", srv.Timeline, c.Slot), nil
		}
		if confirmed := slot.Confirmed; confirmed != 0 && acked != 0 && confirmed > acked {
			return fmt.Sprintf("a failover to timeline %d, and slot %s there confirms %s, past what this process acknowledged (%s)", srv.Timeline, c.Slot, confirmed, acked), nil
		}
	}
	switch {
	case sentHigh > fork:
		return fmt.Sprintf("a failover: timeline %d forked from %d at %s, and Feldera was sent changes up to %s, past the fork, which the new primary never had", srv.Timeline, st.Timeline, fork, sentHigh), nil
	case progress > fork:
		// A commit that ends past the fork is no commit of the new
		// primary's.
		return fmt.Sprintf("a failover: timeline %d forked from %d at %s, and Feldera's progress row says it holds source transactions up to %s, past the fork, which the new primary never had", srv.Timeline, st.Timeline, fork, progress), nil
	case sentHigh == 0 && progress == 0:
		c.Logger.Warn("failover: a new timeline, and this process sent nothing before it, so it cannot tell whether Feldera holds changes past the fork (with synchronized_standby_slots it cannot)",
			"timeline", srv.Timeline, "was", st.Timeline, "fork", fork)
	default:
		c.Logger.Info("failover: a new timeline forked after everything Feldera was sent; streaming on from the slot",
			"timeline", srv.Timeline, "was", st.Timeline, "fork", fork, "sent", sentHigh)
	}
	return "", nil
}

// RecordServer writes the server's identity into the state file once a
// session may stream from it.
func RecordServer(stateFile string, srv Server) error {
	st, err := state.Load(stateFile)
	if err != nil {
		return nil // no state file (SNAPSHOT_MODE=never) or one startup reported on
	}
	if st.SystemID == srv.SystemID && st.Timeline == srv.Timeline {
		return nil
	}
	st.SystemID, st.Timeline = srv.SystemID, srv.Timeline
	if err := state.Save(stateFile, st); err != nil {
		return fatal.Wrap(err)
	}
	return nil
}

// StandbySlot is one standby's copy of the slot.
type StandbySlot struct {
	Host       string `json:"host"`
	InRecovery bool   `json:"in_recovery"`
	SlotSynced *bool  `json:"slot_synced"` // synced and not temporary: usable after a promotion
	Error      string `json:"error,omitempty"`
}

// StandbySlots checks the servers a multi-host PG_DSN lists besides the one
// it connects to: for each in recovery, whether its copy of the slot is
// synchronized and ready for a promotion.
func StandbySlots(ctx context.Context, dsn, slot string) []StandbySlot {
	base, err := pgx.ParseConfig(dsn)
	if err != nil || len(base.Fallbacks) == 0 {
		return nil
	}
	type hp struct {
		host string
		port uint16
	}
	all := []hp{{base.Host, base.Port}}
	for _, f := range base.Fallbacks {
		all = append(all, hp{f.Host, f.Port})
	}
	var out []StandbySlot
	for _, h := range all {
		cfg := base.Copy()
		cfg.Host, cfg.Port, cfg.Fallbacks = h.host, h.port, nil
		cfg.ValidateConnect = nil
		cfg.ConnectTimeout = 5 * time.Second
		cfg.DialFunc = replconn.Dial
		sb := StandbySlot{Host: fmt.Sprintf("%s:%d", h.host, h.port)}
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			sb.Error = "cannot connect"
			out = append(out, sb)
			continue
		}
		err = conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&sb.InRecovery)
		if err == nil && sb.InRecovery {
			var ok bool
			ok, err = replconn.Synced(ctx, conn, slot)
			sb.SlotSynced = &ok
		}
		if err != nil {
			sb.Error = err.Error()
		}
		conn.Close(context.WithoutCancel(ctx))
		if sb.InRecovery || sb.Error != "" {
			out = append(out, sb)
		}
	}
	return out
}

// SentBound is the position the commits of a batch sent now end by
// (connector's noteSent): received is the last WAL position read,
// openCommit the open transaction's commit record's start, and openRows
// whether the batch holds rows of it, which arrive at that record's start
// (a fork exactly there leaves that commit out).
func SentBound(received, openCommit pglogrepl.LSN, openRows bool) pglogrepl.LSN {
	if openRows && openCommit+1 > received {
		return openCommit + 1
	}
	return received
}
