package replconn

import (
	"context"
	"fmt"
	"net"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgfeldera/pgfeldera/internal/fatal"
)

// Every connection to Postgres has TCP keepalives and a user timeout, so
// that one the network dropped without a reset (a NAT or load balancer
// that forgot the flow, an address that failed over) fails within about
// half a minute, whatever the connection is doing: a query waiting for an
// answer, a COPY being read, a status update unacknowledged. Without them
// the kernel retransmits for about 15 minutes first.
const (
	keepAliveIdle     = 15 * time.Second
	keepAliveInterval = 5 * time.Second
	keepAliveCount    = 3
	userTimeout       = 30 * time.Second
)

var pgDialer = &net.Dialer{
	Timeout:         30 * time.Second,
	KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: keepAliveIdle, Interval: keepAliveInterval, Count: keepAliveCount},
	Control: func(network, address string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = setUserTimeout(fd, userTimeout) })
		if err != nil {
			return err
		}
		return serr
	},
}

// Dial is the DialFunc of every Postgres connection.
func Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	return pgDialer.DialContext(ctx, network, addr)
}

// Connect opens a normal (not replication) connection to dsn with Dial.
func Connect(ctx context.Context, dsn string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.DialFunc = Dial
	return pgx.ConnectConfig(ctx, cfg)
}

// PinnedGUCs fix the text output of values: the decoder parses text, so the
// snapshot connection and the replication connection must agree.
var PinnedGUCs = []string{
	"SET TimeZone = 'UTC'",
	"SET DateStyle = 'ISO'",
	"SET IntervalStyle = 'iso_8601'",
	"SET bytea_output = 'hex'",
	"SET extra_float_digits = 3",
}

// Config parses dsn and asks for a logical replication connection
// (replication=database) named pgfeldera, dialed with Dial. A DSN that
// does not parse is fatal, naming PG_DSN.
func Config(dsn string) (*pgconn.Config, error) {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return nil, fatal.Wrap(fmt.Errorf("PG_DSN: %w", err))
	}
	cfg.RuntimeParams["replication"] = "database"
	cfg.RuntimeParams["application_name"] = "pgfeldera"
	cfg.DialFunc = Dial
	return cfg, nil
}
