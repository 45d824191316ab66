// Package metrics exposes a connector's health and Prometheus metrics
// (named pgfeldera_*) over HTTP: /metrics, /healthz and /readyz. It also
// polls the replication slot on a normal connection, for what only
// Postgres knows (confirmed position, retained WAL, wal_status).
//
// Goroutines: Serve starts the HTTP server's, a slot poller and a shutdown
// watcher; when ctx ends it stops them and joins the last two before it
// returns. The Observer methods and the handlers are safe for concurrent
// use (the connector calls them from its session goroutines).
package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/pgfeldera/pgfeldera/connector"
	"github.com/pgfeldera/pgfeldera/delivery"
	"github.com/pgfeldera/pgfeldera/replconn"
)

// Metrics implements connector.Observer and serves the endpoints.
type Metrics struct {
	reg        *prometheus.Registry
	collectors []prometheus.Collector // what reg serves
	batchRows  prometheus.Histogram
	postSecs   prometheus.Histogram
	waitSecs   prometheus.Histogram
	felErrors  *prometheus.CounterVec
	reconnects *prometheus.CounterVec
	stages     *prometheus.HistogramVec

	mu        sync.Mutex
	conn      *connector.Connector
	slot      slotInfo
	dsn, name string
	logger    *slog.Logger
	// slotConn is the poller's connection, kept between reads (a
	// connection per read would fork a backend every interval); nil
	// until the first read and after a failed one.
	slotConn *pgx.Conn
}

type slotInfo struct {
	ok                    bool
	confirmed             pglogrepl.LSN
	retained, safeWalSize float64
	walStatus             string
}

var _ connector.Observer = (*Metrics)(nil)

// New creates the metrics; Attach the connector before serving.
func New(dsn, slot string, logger *slog.Logger) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), dsn: dsn, name: slot, logger: logger}
	m.batchRows = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pgfeldera_batch_rows",
		Help: "Rows per batch Feldera took.", Buckets: prometheus.ExponentialBuckets(1, 4, 10)})
	m.postSecs = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pgfeldera_post_seconds",
		Help: "Time to POST a batch to Feldera's ingress (all tables).", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)})
	m.waitSecs = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pgfeldera_completion_wait_seconds",
		Help: "Time from POST to Feldera reporting the batch complete.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 18)})
	m.felErrors = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pgfeldera_feldera_errors_total",
		Help: "Failed Feldera requests, by error code (transport: no answer)."}, []string{"code"})
	m.reconnects = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pgfeldera_reconnects_total",
		Help: "Replication sessions that ended with an error, by cause."}, []string{"cause"})
	// From 10 ms to about 45 minutes: a transaction waits for a checkpoint
	// under at_least_once (FELDERA_CHECKPOINT_AFTER, 30 s by default) and
	// for the status interval before it is acknowledged.
	m.stages = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "pgfeldera_stage_seconds",
		Help:    "Time from a source transaction's commit in Postgres to a stage: sent (Feldera's ingress took its rows), complete (visible in Feldera), durable (kept by a Feldera restart), acked (the slot may release it).",
		Buckets: prometheus.ExponentialBuckets(0.01, 2, 19)}, []string{"stage"})
	for _, st := range connector.Stages() {
		m.stages.WithLabelValues(st)
	}
	m.collectors = []prometheus.Collector{m.batchRows, m.postSecs, m.waitSecs, m.felErrors, m.reconnects, m.stages, collector{m}}
	m.reg.MustRegister(m.collectors...)
	return m
}

// Attach sets the connector whose counters the metrics read.
func (m *Metrics) Attach(c *connector.Connector) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.conn = c
}

// Batch implements connector.Observer.
func (m *Metrics) Batch(rows int, post, wait time.Duration) {
	m.batchRows.Observe(float64(rows))
	m.postSecs.Observe(post.Seconds())
	m.waitSecs.Observe(wait.Seconds())
}

// FelderaError implements connector.Observer.
func (m *Metrics) FelderaError(code string) { m.felErrors.WithLabelValues(code).Inc() }

// SessionEnded implements connector.Observer.
func (m *Metrics) SessionEnded(cause string) { m.reconnects.WithLabelValues(cause).Inc() }

// Stage implements connector.Observer.
func (m *Metrics) Stage(st connector.Stage, since time.Duration) {
	m.stages.WithLabelValues(st.String()).Observe(since.Seconds())
}

// Handler serves /metrics, /healthz and /readyz.
func (m *Metrics) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		m.mu.Lock()
		c := m.conn
		m.mu.Unlock()
		ok, why := false, "starting"
		if c != nil {
			ok, why = c.Ready()
		}
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprintln(w, why)
	})
	return mux
}

// Serve listens on addr until ctx ends, and polls the slot meanwhile.
func (m *Metrics) Serve(ctx context.Context, addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("HTTP_ADDR=%s: %w", addr, err)
	}
	srv := &http.Server{Handler: m.Handler(), ReadHeaderTimeout: 5 * time.Second}
	// Serve owns the poller and the shutdown watcher: a server that fails
	// to serve stops them, and both are joined before it returns.
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Add(2)
	go func() {
		defer wg.Done()
		m.pollSlot(ctx, 5*time.Second)
	}()
	go func() {
		defer wg.Done()
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	if err := srv.Serve(l); err != nil && err != http.ErrServerClosed {
		return err
	}
	return nil
}

// pollSlot reads the slot on a normal connection every interval.
func (m *Metrics) pollSlot(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	defer m.closeSlotConn()
	for {
		m.readSlot(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (m *Metrics) readSlot(ctx context.Context) {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var s slotInfo
	var confirmed, status *string
	var retained, safe *float64
	var err error
	// A kept connection that fails (Postgres restarted since the last
	// read) is replaced and the read tried once more on a new one.
	for kept := m.slotConn != nil; ; kept = false {
		if m.slotConn == nil {
			if m.slotConn, err = replconn.Connect(qctx, m.dsn); err != nil {
				m.slotConn = nil
				return
			}
		}
		err = m.slotConn.QueryRow(qctx, `SELECT confirmed_flush_lsn::text, wal_status,
			pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::float8, safe_wal_size::float8
			FROM pg_replication_slots WHERE slot_name = $1`, m.name).Scan(&confirmed, &status, &retained, &safe)
		if err == nil || errors.Is(err, pgx.ErrNoRows) {
			break
		}
		m.closeSlotConn()
		if !kept {
			break
		}
	}
	if err == nil {
		s.ok = true
		if confirmed != nil {
			s.confirmed, _ = pglogrepl.ParseLSN(*confirmed)
		}
		if status != nil {
			s.walStatus = *status
		}
		if retained != nil {
			s.retained = *retained
		}
		if safe != nil {
			s.safeWalSize = *safe
		}
	}
	m.mu.Lock()
	m.slot = s
	m.mu.Unlock()
}

func (m *Metrics) closeSlotConn() {
	if m.slotConn != nil {
		m.slotConn.Close(context.Background())
		m.slotConn = nil
	}
}

// collector reads the connector's counters at scrape time.
type collector struct{ m *Metrics }

var (
	descRows      = prometheus.NewDesc("pgfeldera_rows_total", "Rows sent to Feldera, by table and op (insert, delete from the stream; snapshot from COPY).", []string{"table", "op"}, nil)
	descNulled    = prometheus.NewDesc("pgfeldera_values_nulled_total", "Values delivered as NULL that were not NULL in Postgres, by table: NaN and ±Infinity into a nullable column, and with UNREPRESENTABLE_VALUES=null dates and timestamps Feldera cannot hold.", []string{"table"}, nil)
	descEstimate  = prometheus.NewDesc("pgfeldera_snapshot_rows_estimated", "Rows the last snapshot expected per table (pg_class.reltuples).", []string{"table"}, nil)
	descBatches   = prometheus.NewDesc("pgfeldera_batches_total", "Batches Feldera completed (or accepted, in accepted mode).", nil, nil)
	descRetracted = prometheus.NewDesc("pgfeldera_retraction_deletes_total", "Delete lines sent by TRUNCATE and resnapshot retractions.", nil, nil)
	descSessions  = prometheus.NewDesc("pgfeldera_sessions_total", "Replication sessions started.", nil, nil)
	descTxns      = prometheus.NewDesc("pgfeldera_feldera_transactions_total", "Feldera transactions started (FELDERA_TRANSACTIONS, SNAPSHOT_TRANSACTION).", nil, nil)
	descTxnBusy   = prometheus.NewDesc("pgfeldera_feldera_transaction_conflicts_total", "start_transaction answers 409 TransactionInProgress: another client held the pipeline's transaction.", nil, nil)
	descPartial   = prometheus.NewDesc("pgfeldera_partial_commits_total", "Feldera transactions committed holding part of a source transaction, so that views saw a prefix of it: a failed send, a stop or an exit inside one, a snapshot or retraction after a joined one, or one larger than 1,024 batches. The log says which (ERROR).", nil, nil)
	descCkptFail  = prometheus.NewDesc("pgfeldera_checkpoint_failures_total", "Feldera checkpoints asked for that failed (/checkpoint_status): under at_least_once nothing completed since the last checkpoint can be acknowledged while they fail.", nil, nil)
	descReceived  = prometheus.NewDesc("pgfeldera_received_lsn", "Highest WAL position read from the slot.", nil, nil)
	descFlushed   = prometheus.NewDesc("pgfeldera_flushed_lsn", "flush_lsn last sent to Postgres: everything below it is complete in Feldera.", nil, nil)
	descConfirmed = prometheus.NewDesc("pgfeldera_confirmed_lsn", "The slot's confirmed_flush_lsn, as Postgres reports it.", nil, nil)
	descLag       = prometheus.NewDesc("pgfeldera_lag_bytes", "Received minus confirmed position.", nil, nil)
	descRetained  = prometheus.NewDesc("pgfeldera_slot_retained_wal_bytes", "WAL the slot keeps on the primary (current LSN minus restart_lsn).", nil, nil)
	descSafe      = prometheus.NewDesc("pgfeldera_slot_safe_wal_size_bytes", "WAL that can still be written before the slot is lost (max_slot_wal_keep_size).", nil, nil)
	descStatus    = prometheus.NewDesc("pgfeldera_slot_wal_status", "1 for the slot's current wal_status (reserved, extended, unreserved, lost); 0 for the others.", []string{"status"}, nil)
	descReady     = prometheus.NewDesc("pgfeldera_ready", "1 when /readyz is ready.", nil, nil)
	descGate      = prometheus.NewDesc("pgfeldera_ack_gate", "1 for the acknowledgement gate in use: complete (at completion: no fault tolerance, or exactly_once) or checkpoint (once a checkpoint covers the batch: at_least_once).", []string{"gate"}, nil)
	descCkptWait  = prometheus.NewDesc("pgfeldera_checkpoint_wait_seconds", "How long completed work has waited for a Feldera checkpoint to cover it (checkpoint gate); 0 when nothing waits.", nil, nil)
	descCkptWAL   = prometheus.NewDesc("pgfeldera_checkpoint_wait_wal_bytes", "Bytes of WAL the slot retains for completed work waiting for a Feldera checkpoint (checkpoint gate); FELDERA_CHECKPOINT_WAL bounds it.", nil, nil)
	descChunks    = prometheus.NewDesc("pgfeldera_snapshot_chunks", "An incremental snapshot's chunks per table: done (durable in Feldera and recorded in the state file) and total (done plus the estimate of those left, from pg_class.reltuples).", []string{"table", "state"}, nil)
	descFence     = prometheus.NewDesc("pgfeldera_ingress_fence_seconds", "Seconds before ingress may send again: an earlier request got no clear answer and Feldera may still apply it (FELDERA_INGRESS_FENCE); 0 when not fenced.", nil, nil)
)

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRows, descNulled, descEstimate, descBatches, descRetracted, descSessions, descTxns, descTxnBusy, descPartial, descCkptFail, descReceived, descFlushed, descConfirmed, descLag, descRetained, descSafe, descStatus, descReady, descFence, descGate, descCkptWait, descCkptWAL, descChunks} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	c.m.mu.Lock()
	conn, slot := c.m.conn, c.m.slot
	c.m.mu.Unlock()
	if conn == nil {
		return
	}
	st := conn.Stats()
	collectTables(ch, conn)
	ch <- prometheus.MustNewConstMetric(descBatches, prometheus.CounterValue, float64(st.Batches.Load()))
	ch <- prometheus.MustNewConstMetric(descRetracted, prometheus.CounterValue, float64(st.Retracted.Load()))
	ch <- prometheus.MustNewConstMetric(descSessions, prometheus.CounterValue, float64(st.Sessions.Load()))
	ch <- prometheus.MustNewConstMetric(descTxns, prometheus.CounterValue, float64(st.Transactions.Load()))
	ch <- prometheus.MustNewConstMetric(descTxnBusy, prometheus.CounterValue, float64(st.TransactionConflicts.Load()))
	ch <- prometheus.MustNewConstMetric(descPartial, prometheus.CounterValue, float64(st.PartialCommits.Load()))
	ch <- prometheus.MustNewConstMetric(descCkptFail, prometheus.CounterValue, float64(st.CheckpointFailures.Load()))
	received := st.Received.Load()
	ch <- prometheus.MustNewConstMetric(descReceived, prometheus.GaugeValue, float64(received))
	ch <- prometheus.MustNewConstMetric(descFlushed, prometheus.GaugeValue, float64(st.Acked.Load()))
	collectSlot(ch, slot, received)
	ready := 0.0
	if ok, _ := conn.Ready(); ok {
		ready = 1
	}
	ch <- prometheus.MustNewConstMetric(descReady, prometheus.GaugeValue, ready)
	ch <- prometheus.MustNewConstMetric(descFence, prometheus.GaugeValue, conn.IngressFenced().Seconds())
	for _, g := range []delivery.Gate{delivery.GateComplete, delivery.GateCheckpoint} {
		v := 0.0
		if conn.Gate() == g {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descGate, prometheus.GaugeValue, v, g.String())
	}
	ch <- prometheus.MustNewConstMetric(descCkptWait, prometheus.GaugeValue, conn.CheckpointWait().Seconds())
	ch <- prometheus.MustNewConstMetric(descCkptWAL, prometheus.GaugeValue, float64(conn.CheckpointWaitWAL()))
}

// collectTables sends each table's row counts, snapshot estimate and
// chunks, labelled by its Feldera name.
func collectTables(ch chan<- prometheus.Metric, conn *connector.Connector) {
	for _, t := range conn.Tables() {
		ch <- prometheus.MustNewConstMetric(descRows, prometheus.CounterValue, float64(t.Inserts.Load()), t.Dest, "insert")
		ch <- prometheus.MustNewConstMetric(descRows, prometheus.CounterValue, float64(t.Deletes.Load()), t.Dest, "delete")
		ch <- prometheus.MustNewConstMetric(descRows, prometheus.CounterValue, float64(t.Copied.Load()), t.Dest, "snapshot")
		ch <- prometheus.MustNewConstMetric(descEstimate, prometheus.GaugeValue, float64(t.Estimate.Load()), t.Dest)
		ch <- prometheus.MustNewConstMetric(descNulled, prometheus.CounterValue, float64(t.Nulled.Load()), t.Dest)
		if total := t.ChunksTotal.Load(); total > 0 {
			ch <- prometheus.MustNewConstMetric(descChunks, prometheus.GaugeValue, float64(t.ChunksDone.Load()), t.Dest, "done")
			ch <- prometheus.MustNewConstMetric(descChunks, prometheus.GaugeValue, float64(total), t.Dest, "total")
		}
	}
}

// collectSlot sends the slot's positions, lag and WAL status as Postgres
// last reported them; none when the last read failed, so no stale values.
func collectSlot(ch chan<- prometheus.Metric, slot slotInfo, received uint64) {
	if slot.ok {
		ch <- prometheus.MustNewConstMetric(descConfirmed, prometheus.GaugeValue, float64(slot.confirmed))
		lag := 0.0
		if received > uint64(slot.confirmed) {
			lag = float64(received - uint64(slot.confirmed))
		}
		ch <- prometheus.MustNewConstMetric(descLag, prometheus.GaugeValue, lag)
		ch <- prometheus.MustNewConstMetric(descRetained, prometheus.GaugeValue, slot.retained)
		ch <- prometheus.MustNewConstMetric(descSafe, prometheus.GaugeValue, slot.safeWalSize)
		for _, s := range []string{"reserved", "extended", "unreserved", "lost"} {
			v := 0.0
			if s == slot.walStatus {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(descStatus, prometheus.GaugeValue, v, s)
		}
	}
}
