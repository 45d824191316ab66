package metrics

import (
	"context"
	"regexp"
	"sort"

	"github.com/prometheus/client_golang/prometheus"
)

// ReadSlot reads the slot once, as the poller in Serve does, and closes
// the poller's connection, as Serve does when it stops.
func (m *Metrics) ReadSlot(ctx context.Context) {
	m.readSlot(ctx)
	m.closeSlotConn()
}

// ReadSlotKept reads the slot as one tick of the poller does, keeping its
// connection, and reports whether the slot was read and the server pid of
// the connection kept (0 when none is).
func (m *Metrics) ReadSlotKept(ctx context.Context) (ok bool, pid uint32) {
	m.readSlot(ctx)
	if m.slotConn != nil {
		pid = m.slotConn.PgConn().PID()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.slot.ok, pid
}

// CloseSlotConn closes the poller's connection, as Serve does when it stops.
func (m *Metrics) CloseSlotConn() { m.closeSlotConn() }

var descName = regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)

// Exported lists every metric the binary serves, with its labels, as the
// README writes it: name{label,label}.
func Exported(m *Metrics) []string {
	ch := make(chan *prometheus.Desc, 64)
	go func() {
		for _, c := range m.collectors {
			c.Describe(ch)
		}
		close(ch)
	}()
	var out []string
	for d := range ch {
		g := descName.FindStringSubmatch(d.String())
		if g == nil {
			panic("unexpected prometheus.Desc format: " + d.String())
		}
		name := g[1]
		if g[2] != "" {
			name += "{" + g[2] + "}"
		}
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}
