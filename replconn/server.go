package replconn

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
)

// ServerMajor is the major version in server_version ("17.10 (Debian
// …)", "18beta1").
func ServerMajor(v string) (int, error) {
	major, err := strconv.Atoi(v[:len(v)-len(strings.TrimLeft(v, "0123456789"))])
	if err != nil {
		return 0, fmt.Errorf("server_version %q: no major version", v)
	}
	return major, nil
}

// ForkPoint is where timeline old ended in the history of timeline tli.
func ForkPoint(ctx context.Context, conn *pgconn.PgConn, tli, old int32) (pglogrepl.LSN, error) {
	h, err := pglogrepl.TimelineHistory(ctx, conn, tli)
	if err != nil {
		return 0, fmt.Errorf("TIMELINE_HISTORY %d: %w", tli, err)
	}
	return ParseFork(string(h.Content), tli, old)
}

// ParseFork reads a timeline history file (lines "parent-tli switchpoint
// reason"): the first switch at or after timeline old, where old, or a
// timeline it became, ended.
func ParseFork(content string, tli, old int32) (pglogrepl.LSN, error) {
	var fork pglogrepl.LSN
	for _, line := range strings.Split(content, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || strings.HasPrefix(f[0], "#") {
			continue
		}
		t, err := strconv.Atoi(f[0])
		if err != nil {
			return 0, fmt.Errorf("timeline %d history: %q: %w", tli, line, err)
		}
		lsn, err := pglogrepl.ParseLSN(f[1])
		if err != nil {
			return 0, fmt.Errorf("timeline %d history: %q: %w", tli, line, err)
		}
		if int32(t) >= old && (fork == 0 || lsn < fork) {
			fork = lsn
		}
	}
	if fork == 0 {
		return 0, fmt.Errorf("timeline %d history does not say where timeline %d ended", tli, old)
	}
	return fork, nil
}
