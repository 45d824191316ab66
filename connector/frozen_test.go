package connector_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/connector"
	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
	"github.com/pgfeldera/pgfeldera/internal/tcpproxy"
)

// frozenCluster is a cluster with wal_sender_timeout = 10s, shared by the
// frozen-connection tests.
func frozenCluster(t *testing.T) *pgcluster.Cluster {
	return pgcluster.New(t, pgcluster.Options{Settings: map[string]string{"wal_sender_timeout": "10s"}})
}

// proxied starts a proxy to the cluster and returns it with e's DSN
// through it.
func proxied(t *testing.T, e *env, c *pgcluster.Cluster) (*tcpproxy.Proxy, string) {
	p, err := tcpproxy.Start(fmt.Sprintf("127.0.0.1:%d", c.Port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	dsn := strings.Replace(e.dsn, fmt.Sprintf("127.0.0.1:%d", c.Port), p.Addr(), 1)
	if dsn == e.dsn {
		t.Fatalf("DSN %s does not name the cluster's address", e.dsn)
	}
	return p, dsn
}

// frozenConnector is a connector of users on cluster through a proxy
// the test can freeze; unsafe turns its heartbeat off.
func frozenConnector(t *testing.T, cluster *pgcluster.Cluster, unsafe bool) (*env, *tcpproxy.Proxy, *connector.Connector) {
	e := newEnvOn(t, cluster, mixedPG, mixedFeldera, nil)
	proxy, dsn := proxied(t, e, cluster)
	cfg := e.config("users")
	cfg.DSN = dsn
	c := e.newConnector(cfg, e.client)
	if unsafe {
		connector.NoHeartbeat(c)
	}
	return e, proxy, c
}

// The replication connection goes silent mid-stream, a writer running:
// the proxy it goes through stops forwarding without closing it (a NAT or
// load balancer that dropped the flow). The session notices within the
// replication timeout (the server's wal_sender_timeout, 10 s), reconnects
// in the same process, ending the walsender that still held the slot, and
// catches up: exact within 30 s. Without the heartbeat nothing notices.
func TestLiveness_FrozenReplicationConnection(t *testing.T) {
	pgcluster.EveryVersion(t)
	t.Parallel()
	cluster := frozenCluster(t)
	for _, unsafe := range []bool{false, true} {
		t.Run(map[bool]string{false: "heartbeat", true: "no_heartbeat_UNSAFE"}[unsafe], func(t *testing.T) {
			if unsafe {
				pgcluster.AnyVersion(t) // the check sees a hang: one server shows it
			}
			e, proxy, c := frozenConnector(t, cluster, unsafe)
			r := e.run(c)
			e.waitSlot()
			w := e.startWriter("users", 0)
			// Mid-stream: the freeze lands after START_REPLICATION was
			// answered (TestLiveness_FrozenAtStartReplication freezes it
			// before). The startup's queries before it are bounded by the
			// TCP keepalives and TCP_USER_TIMEOUT, which a real network
			// drop trips and this proxy, alive and acknowledging, does not.
			e.waitLog("session: streaming", 30*time.Second)
			e.waitConfirmed(e.currentLSN(), 30*time.Second)
			began := c.Stats().Sessions.Load()
			if n := proxy.Freeze(); n == 0 {
				t.Fatal("no connection to freeze")
			}
			frozen := time.Now()
			deadline := frozen.Add(30 * time.Second)
			for time.Now().Before(deadline) && c.Stats().Sessions.Load() <= began {
				time.Sleep(50 * time.Millisecond)
			}
			w.halt()
			target := e.currentLSN()
			for time.Now().Before(deadline) && e.confirmed() < target {
				time.Sleep(50 * time.Millisecond)
			}
			caughtUp := e.confirmed() >= target && e.diff("users", "users") == ""
			if unsafe {
				if caughtUp {
					t.Fatal("without the heartbeat the session still caught up: the test cannot see a silent connection")
				}
				return
			}
			if !caughtUp {
				t.Fatalf("not caught up within 30 s of the freeze (sessions %d)\n%s", c.Stats().Sessions.Load(), tail(e.logs.String(), 3000))
			}
			select {
			case err := <-r.done:
				t.Fatalf("the process stopped: %v", err)
			default:
			}
			logs := e.logs.String()
			if !strings.Contains(logs, "replication connection silent") {
				t.Fatalf("the session did not end as silent\n%s", tail(logs, 3000))
			}
			t.Logf("caught up %s after the freeze", time.Since(frozen).Round(time.Millisecond))
		})
	}
}

// The replication connection goes silent before START_REPLICATION is
// answered (here: before it is sent, the proxy frozen right then). The
// wait for the answer is bounded by the liveness timeout (10 s): the
// session ends silent, the next one streams, and a change made since
// reaches Feldera. Without the heartbeat (no timeout) the first session
// waits for ever and none ever streams.
func TestLiveness_FrozenAtStartReplication(t *testing.T) {
	pgcluster.AnyVersion(t)
	t.Parallel()
	cluster := frozenCluster(t)
	for _, unsafe := range []bool{false, true} {
		t.Run(map[bool]string{false: "bounded", true: "no_heartbeat_UNSAFE"}[unsafe], func(t *testing.T) {
			e, proxy, c := frozenConnector(t, cluster, unsafe)
			var once sync.Once
			connector.BeforeStartReplication(c, func() { once.Do(func() { proxy.Freeze() }) })
			e.run(c)
			deadline := time.Now().Add(30 * time.Second)
			for time.Now().Before(deadline) && c.Stats().Sessions.Load() == 0 {
				time.Sleep(50 * time.Millisecond)
			}
			streamed := c.Stats().Sessions.Load() > 0
			if unsafe {
				if streamed {
					t.Fatal("without the heartbeat a session still streamed: the test cannot see the wait")
				}
				return
			}
			if !streamed {
				t.Fatalf("no session streamed within 30 s of a freeze at START_REPLICATION\n%s", tail(e.logs.String(), 3000))
			}
			e.exec("INSERT INTO users VALUES (1, 'after', 1)")
			e.waitConfirmed(e.currentLSN(), 30*time.Second)
			e.assertEqual("users", "users")
			if !strings.Contains(e.logs.String(), "no answer") {
				t.Fatalf("the first session did not end on START_REPLICATION's silence\n%s", tail(e.logs.String(), 3000))
			}
		})
	}
}

// The same for a chunk connection during an incremental snapshot: the
// busiest connection (the one a chunk's COPY flows on) goes silent; the
// read gives up after the replication timeout, the session reconnects and
// resumes the snapshot from its last durable chunk.
func TestLiveness_FrozenChunkConnection(t *testing.T) {
	pgcluster.EveryVersion(t)
	t.Parallel()
	cluster := frozenCluster(t)
	e := newEnvOn(t, cluster, mixedPG, mixedFeldera, nil)
	// 100 chunks of 120 KB: the freeze lands with most of them to go.
	e.exec("INSERT INTO users SELECT g, repeat('x', 200), g FROM generate_series(1, 60000) g")
	proxy, dsn := proxied(t, e, cluster)
	cfg := e.incrementalConfig("users", 600)
	cfg.DSN = dsn
	c := e.newConnector(cfg, e.client)
	r := e.run(c)
	e.waitLog("snapshot: incremental: chunk read", 60*time.Second)
	if !proxy.FreezeBusiest() {
		t.Fatal("no connection to freeze")
	}
	frozen := time.Now()
	deadline := frozen.Add(30 * time.Second)
	for time.Now().Before(deadline) && c.Stats().Sessions.Load() < 2 {
		time.Sleep(50 * time.Millisecond)
	}
	if c.Stats().Sessions.Load() < 2 {
		t.Fatalf("no new session within 30 s of the freeze\n%s", tail(e.logs.String(), 3000))
	}
	e.waitLog("snapshot: incremental: complete", 5*time.Minute)
	e.waitConfirmed(e.currentLSN(), 60*time.Second)
	e.assertEqual("users", "users")
	if !strings.Contains(e.logs.String(), "the connection went silent") {
		t.Fatalf("the chunk read did not end as silent\n%s", tail(e.logs.String(), 3000))
	}
	select {
	case err := <-r.done:
		t.Fatalf("the process stopped: %v", err)
	default:
	}
}
