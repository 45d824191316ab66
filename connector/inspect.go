package connector

import (
	"github.com/pgfeldera/pgfeldera/catalog"
	"github.com/pgfeldera/pgfeldera/decode"
	"github.com/pgfeldera/pgfeldera/setup"
)

// Inspect is what `pgfeldera check` (setup.Check) and `pgfeldera verify`
// (verify.Tables) look at the prerequisites with: the startup checks a
// run under cfg makes, with cfg's defaults, and the settings only check
// reads. It builds no connector and opens nothing.
func Inspect(cfg Config) (setup.Config, setup.CheckOptions, error) {
	cfg, err := cfg.WithDefaults()
	if err != nil {
		return setup.Config{}, setup.CheckOptions{}, err
	}
	sc := setupConfig(cfg, false, nil)
	sc.Logger = cfg.Logger.With("component", "connector", "slot", cfg.Slot)
	return sc, setup.CheckOptions{StateFile: cfg.StateFile, SlotFailover: cfg.SlotFailover,
		AckAccepted: cfg.AckMode == AckAccepted}, nil
}

// setupConfig is what the startup checks need of the configuration;
// onNull sees each value delivered as NULL (nil: none counted).
func setupConfig(cfg Config, ignoreFilter bool, onNull func(table, column string, err error)) setup.Config {
	return setup.Config{
		DSN: cfg.DSN, Slot: cfg.Slot, Publication: cfg.Publication, Tables: cfg.Tables,
		RequirePrimaryKey: cfg.RequirePrimaryKey, CheckpointWAL: cfg.CheckpointWAL,
		Options: func(types *catalog.Types) decode.Options {
			return decodeOptions(cfg, types, onNull)
		},
		IgnoreFilter: ignoreFilter, Logger: cfg.Logger, Progress: cfg.ProgressTable,
	}
}

// decodeOptions are the decoder's planning options under cfg.
func decodeOptions(cfg Config, types *catalog.Types, onNull func(table, column string, err error)) decode.Options {
	o := decode.Options{NullUnrepresentable: cfg.NullUnrepresentable, OnNull: onNull}
	if types != nil {
		o.Types = types.Lookup
	}
	return o
}
