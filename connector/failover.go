package connector

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfeldera/pgfeldera/catalog"
	"github.com/pgfeldera/pgfeldera/internal/fatal"
	"github.com/pgfeldera/pgfeldera/replconn"
	"github.com/pgfeldera/pgfeldera/state"
)

// Failover (issue 18). Since PostgreSQL 17 a logical slot created with
// FAILOVER is synchronized to a physical standby that runs with
// sync_replication_slots, and survives the standby's promotion. Two
// things make that safe for Feldera:
//
//   - synchronized_standby_slots on the primary, listing the standby's
//     physical slot: the primary then sends a logical walsender nothing
//     the standby has not flushed. Without it, pgfeldera can deliver a
//     transaction the standby never received; after a failover Feldera
//     holds rows the new primary never had (phantom rows), and the stream
//     cannot retract them.
//   - every session checks which server it reached: the system identifier
//     (another cluster takes the resnapshot path) and the timeline. On a
//     new timeline, the timeline history gives the position where the old
//     one forked; if this process sent Feldera anything past it, Feldera
//     may hold phantom rows, and the resnapshot path is taken, saying why.

// Slot failover settings (PG_SLOT_FAILOVER).
const (
	FailoverAuto = "auto" // on when the server is 17+
	FailoverOn   = "on"   // refuse a server below 17
	FailoverOff  = "off"
)

// minFailoverVersion is the first major version with failover slots.
const minFailoverVersion = 17

// server is what a session learned of the server it reached.
type server struct {
	major    int
	systemID string
	timeline int32
	failover bool // slots are created with FAILOVER, and converted
	// walEnd is IDENTIFY_SYSTEM's xlogpos: the server's WAL flush
	// position when the session began (see idleKeepalive).
	walEnd pglogrepl.LSN
}

// identify reads the server's version, system identifier and timeline on
// the replication connection, and whether its slots fail over.
func (c *Connector) identify(ctx context.Context, conn *pgconn.PgConn) (server, error) {
	var srv server
	major, err := replconn.ServerMajor(conn.ParameterStatus("server_version"))
	if err != nil {
		return srv, err
	}
	srv.major = major
	id, err := pglogrepl.IdentifySystem(ctx, conn)
	if err != nil {
		return srv, fmt.Errorf("IDENTIFY_SYSTEM: %w", err)
	}
	srv.systemID, srv.timeline, srv.walEnd = id.SystemID, id.Timeline, id.XLogPos
	switch c.cfg.SlotFailover {
	case FailoverOn:
		if major < minFailoverVersion {
			return srv, fatal.Wrap(fmt.Errorf("PG_SLOT_FAILOVER=on: PostgreSQL %d has no failover slots (17 or later does); set PG_SLOT_FAILOVER=off or auto", major))
		}
		srv.failover = true
	case FailoverOff:
	default:
		srv.failover = major >= minFailoverVersion
	}
	return srv, nil
}

// preflight checks, on a server with failover slots, what failover needs
// on the primary, logs what is missing, and converts the slot to failover
// when it exists without it and no walsender holds it.
func (c *Connector) preflight(ctx context.Context, conn *pgconn.PgConn, srv server) error {
	if srv.major < minFailoverVersion {
		return nil
	}
	if err := c.convertSlot(ctx, conn, srv); err != nil {
		return err
	}
	if !srv.failover {
		return nil
	}
	listed, err := c.standbySlots(ctx, conn)
	if err != nil || listed == "" {
		return err
	}
	c.logger.Info("failover: slots fail over; the primary waits for the standby slots before sending", "synchronized_standby_slots", listed)
	for _, sb := range StandbySlots(ctx, c.cfg.DSN, c.cfg.Slot) {
		switch {
		case sb.Error != "":
			c.logger.Warn("failover: a server PG_DSN lists cannot be checked", "server", sb.Host, "err", sb.Error)
		case sb.SlotSynced != nil && *sb.SlotSynced:
			c.logger.Info("failover: the standby holds a synced copy of the slot, usable after a promotion", "server", sb.Host)
		default:
			c.logger.Warn("failover: the standby's copy of the slot is not ready (synced, not temporary): a failover now would resnapshot", "server", sb.Host)
		}
	}
	return nil
}

// convertSlot gives an existing slot failover when the server should fail
// it over and no walsender holds it; otherwise it says what is missing.
func (c *Connector) convertSlot(ctx context.Context, conn *pgconn.PgConn, srv server) error {
	slot, err := replconn.ReadFailoverSlot(ctx, conn, c.cfg.Slot)
	if err != nil || !slot.Exists {
		return err
	}
	failover, active := slot.Failover, slot.Active
	switch {
	case failover || !srv.failover:
		if !failover {
			c.logger.Warn("failover: slot "+c.cfg.Slot+" has no failover (PG_SLOT_FAILOVER=off): it is lost with the primary, and a failover resnapshots every table", "slot", c.cfg.Slot)
		}
	case active:
		c.logger.Warn("failover: slot "+c.cfg.Slot+" was created without failover, and a walsender holds it, so it is not converted now: it would be lost with the primary", "slot", c.cfg.Slot)
	default:
		if _, err := conn.Exec(ctx, "ALTER_REPLICATION_SLOT "+catalog.QuoteIdent(c.cfg.Slot)+" ( FAILOVER true )").ReadAll(); err != nil {
			return fmt.Errorf("failover: convert slot %s to failover: %w", c.cfg.Slot, err)
		}
		c.logger.Info("failover: slot "+c.cfg.Slot+" was created without failover; converted (ALTER_REPLICATION_SLOT ... FAILOVER true)", "slot", c.cfg.Slot)
	}
	return nil
}

// standbySlots reads synchronized_standby_slots and says what is wrong
// with it: empty (the phantom-row window: refused with PG_SLOT_FAILOVER=on
// at the first session, warned otherwise) or listing slots that are
// missing, not physical or not active. It returns the list.
func (c *Connector) standbySlots(ctx context.Context, conn *pgconn.PgConn) (string, error) {
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
		if c.cfg.SlotFailover == FailoverOn && c.stats.Sessions.Load() == 0 {
			return "", fatal.Wrap(fmt.Errorf("PG_SLOT_FAILOVER=on: %w", err))
		}
		c.logger.Warn("failover: PHANTOM-ROW WINDOW: " + err.Error())
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
			c.logger.Warn("failover: synchronized_standby_slots lists "+name+", which does not exist: the primary holds logical decoding back until it does", "slot", name)
		case !sb.Physical:
			c.logger.Warn("failover: synchronized_standby_slots lists "+name+", which is not a physical slot", "slot", name)
		case sb.ActivePID == 0:
			c.logger.Warn("failover: the standby slot "+name+" is not active: no standby streams from it, and the primary holds logical decoding back until one does", "slot", name)
		}
	}
	return listed, nil
}

// diverged says why the state's tables cannot be trusted on this server
// ("" when they can): another cluster, or a new timeline that forked
// before something this process sent Feldera.
func (c *Connector) diverged(ctx context.Context, conn *pgconn.PgConn, st *state.State, srv server) (string, error) {
	if st == nil || st.SystemID == "" {
		return "", nil
	}
	if st.SystemID != srv.systemID {
		return fmt.Sprintf("the server is another cluster (system identifier %s; the tables were copied from %s)", srv.systemID, st.SystemID), nil
	}
	if st.Timeline == 0 || srv.timeline == st.Timeline {
		return "", nil
	}
	if srv.timeline < st.Timeline {
		return fmt.Sprintf("the server is on timeline %d, older than %d the tables were streamed on", srv.timeline, st.Timeline), nil
	}
	fork, err := replconn.ForkPoint(ctx, conn, srv.timeline, st.Timeline)
	if err != nil {
		return "", err
	}
	// The slot on the new timeline must be the synchronized copy: a
	// failover slot, not ahead of what this process acknowledged. (A
	// missing slot is the resnapshot path anyway.)
	slot, err := replconn.ReadFailoverSlot(ctx, conn, c.cfg.Slot)
	if err != nil {
		return "", err
	}
	if slot.Exists {
		if !slot.Failover {
			return fmt.Sprintf("a failover to timeline %d, and slot %s there is not a failover slot (not the synchronized copy)", srv.timeline, c.cfg.Slot), nil
		}
		if confirmed := slot.Confirmed; confirmed != 0 && c.acked != 0 && confirmed > c.acked {
			return fmt.Sprintf("a failover to timeline %d, and slot %s there confirms %s, past what this process acknowledged (%s)", srv.timeline, c.cfg.Slot, confirmed, c.acked), nil
		}
	}
	switch {
	case c.sentHigh > fork:
		return fmt.Sprintf("a failover: timeline %d forked from %d at %s, and Feldera was sent changes up to %s, past the fork, which the new primary never had", srv.timeline, st.Timeline, fork, c.sentHigh), nil
	case c.sentHigh == 0:
		c.logger.Warn("failover: a new timeline, and this process sent nothing before it, so it cannot tell whether Feldera holds changes past the fork (with synchronized_standby_slots it cannot)",
			"timeline", srv.timeline, "was", st.Timeline, "fork", fork)
	default:
		c.logger.Info("failover: a new timeline forked after everything Feldera was sent; streaming on from the slot",
			"timeline", srv.timeline, "was", st.Timeline, "fork", fork, "sent", c.sentHigh)
	}
	return "", nil
}

// recordServer writes the server's identity into the state file once a
// session may stream from it.
func (c *Connector) recordServer(srv server) error {
	st, err := state.Load(c.cfg.StateFile)
	if err != nil {
		return nil // no state file (SNAPSHOT_MODE=never) or one startup reported on
	}
	if st.SystemID == srv.systemID && st.Timeline == srv.timeline {
		return nil
	}
	st.SystemID, st.Timeline = srv.systemID, srv.timeline
	if err := state.Save(c.cfg.StateFile, st); err != nil {
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
