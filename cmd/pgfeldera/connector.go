package main

import (
	"context"
	"errors"
	"log/slog"

	"github.com/pgfeldera/pgfeldera/connector"
	"github.com/pgfeldera/pgfeldera/feldera"
	"github.com/pgfeldera/pgfeldera/metrics"
	"github.com/pgfeldera/pgfeldera/state"
)

// runConnector wires the connector and returns the exit code.
func runConnector(ctx context.Context, stop func(), cfg *Config, logger *slog.Logger) int {
	go func() {
		<-ctx.Done()
		logger.Info("pgfeldera: stopping gracefully (a second signal exits at once)")
		stop() // restore default signal handling: a second signal kills
	}()
	client, err := cfg.felderaClient(logger)
	if err != nil {
		logger.Error("pgfeldera: " + err.Error())
		return exitConfig
	}
	ccfg := cfg.connectorConfig(logger)
	var m *metrics.Metrics
	if cfg.HTTPAddr != "" {
		m = metrics.New(cfg.DSN, cfg.Slot, logger)
		ccfg.Observer = m
	}
	conn, err := connector.New(ccfg, client)
	if err != nil {
		logger.Error("pgfeldera: " + err.Error())
		return exitConfig
	}
	if m != nil {
		m.Attach(conn)
		httpCtx, stopHTTP := context.WithCancel(context.Background())
		defer stopHTTP()
		go func() {
			if err := m.Serve(httpCtx, cfg.HTTPAddr); err != nil {
				logger.Error("pgfeldera: metrics server", "err", err)
			}
		}()
	}
	logger.Info("pgfeldera: starting", "version", version, "postgres", redactDSN(cfg.DSN), "feldera", feldera.RedactURL(cfg.FelderaURL),
		"pipeline", cfg.Pipeline, "publication", cfg.Publication, "slot", cfg.Slot, "tables", len(cfg.Tables), "snapshot_mode", cfg.SnapshotMode)
	if err := conn.Run(ctx); err != nil {
		var locked *state.LockedError
		if errors.As(err, &locked) {
			// Another process runs this connector: a deployment error.
			logger.Error("pgfeldera: " + locked.Error())
			return exitConfig
		}
		logger.Error("pgfeldera: fatal", "err", err)
		return exitFatal
	}
	return exitOK
}

// felderaClient is the Feldera API client the settings name.
func (c *Config) felderaClient(logger *slog.Logger) (*feldera.Client, error) {
	return feldera.New(feldera.Config{URL: c.FelderaURL, Pipeline: c.Pipeline, APIKey: c.APIKey, RequestTimeout: c.RequestTimeout, Logger: logger})
}

func (c *Config) connectorConfig(logger *slog.Logger) connector.Config {
	return connector.Config{
		DSN:                 c.DSN,
		Publication:         c.Publication,
		Slot:                c.Slot,
		Tables:              c.Tables,
		AckMode:             c.AckMode,
		RequirePrimaryKey:   c.RequirePrimaryKey,
		CompletionTimeout:   c.CompletionTimeout,
		CommitStallTimeout:  c.CommitStallTimeout,
		ReplicationTimeout:  c.ReplicationTimeout,
		IngressFence:        c.IngressFence,
		StopTimeout:         c.StopTimeout,
		CheckpointAfter:     c.CheckpointAfter,
		CheckpointWAL:       c.CheckpointWAL,
		BatchMaxRows:        c.BatchMaxRows,
		SnapshotChunkRows:   c.SnapshotChunkRows,
		SnapshotParallelism: c.SnapshotParallelism,
		BatchMaxBytes:       c.BatchMaxBytes,
		BatchMaxInFlight:    c.BatchMaxInFlight,
		Transactions:        c.Transactions,
		SnapshotTransaction: c.SnapshotTxn,
		ProgressTable:       c.ProgressTable,
		NullUnrepresentable: c.NullUnrepresentable,
		BatchLinger:         c.BatchLinger,
		SnapshotMode:        c.SnapshotMode,
		SlotFailover:        c.SlotFailover,
		StateFile:           c.StateFile,
		NoProgressTimeout:   c.NoProgressTimeout,
		Logger:              logger,
	}
}
