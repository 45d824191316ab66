package main

import (
	"context"
	"log/slog"
)

// runConnector wires the connector and returns the exit code.
func runConnector(ctx context.Context, stop func(), cfg *Config, logger *slog.Logger) int {
	logger.Error("pgfeldera run: the connector is not wired yet")
	return exitFatal
}
