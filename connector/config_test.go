package connector_test

import (
	"strings"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/catalog"
	"github.com/pgfeldera/pgfeldera/connector"
)

func TestConfig_WithDefaults(t *testing.T) {
	base := connector.Config{DSN: "host=/tmp", Publication: "pub", Slot: "slot", Tables: []catalog.Table{{Schema: "public", Name: "users", Dest: "users"}}}

	t.Run("OK", func(t *testing.T) {
		cfg, err := base.WithDefaults()
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			name      string
			got, want any
		}{
			{"AckMode", cfg.AckMode, connector.AckCompleted},
			{"Transactions", cfg.Transactions, connector.TxnAuto},
			{"ProgressTable", cfg.ProgressTable, "auto"}, // declaring the table is the opt-in
			{"SnapshotMode", cfg.SnapshotMode, connector.SnapshotInitial},
			{"BatchMaxRows", cfg.BatchMaxRows, connector.DefaultBatchMaxRows},
			{"BatchMaxBytes", cfg.BatchMaxBytes, connector.DefaultBatchMaxBytes},
			{"BatchMaxInFlight", cfg.BatchMaxInFlight, connector.DefaultBatchMaxInFlight},
			{"CompletionTimeout", cfg.CompletionTimeout, connector.DefaultCompletionTimeout},
			{"CommitStallTimeout", cfg.CommitStallTimeout, connector.DefaultCommitStallTimeout},
			{"NoProgressTimeout", cfg.NoProgressTimeout, connector.DefaultNoProgressTimeout},
			{"IngressFence", cfg.IngressFence, connector.DefaultIngressFence},
			{"StopTimeout", cfg.StopTimeout, connector.DefaultStopTimeout},
			{"CheckpointAfter", cfg.CheckpointAfter, connector.DefaultCheckpointAfter},
			{"ReadyBlockedFor", cfg.ReadyBlockedFor, connector.ReadyBlockedFor},
			{"BackoffInitial", cfg.BackoffInitial, time.Second},
			{"BackoffMax", cfg.BackoffMax, 30 * time.Second},
		} {
			if c.got != c.want {
				t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
			}
		}
		if cfg.Logger == nil {
			t.Error("Logger = nil, want slog.Default()")
		}
	})

	t.Run("ErrRequired", func(t *testing.T) {
		cfg := base
		cfg.Slot = ""
		_, err := cfg.WithDefaults()
		if want := "connector: DSN, publication, slot and tables are required"; err == nil || err.Error() != want {
			t.Fatalf("err = %v, want %q", err, want)
		}
	})

	t.Run("ErrTransactions", func(t *testing.T) {
		cfg := base
		cfg.Transactions = "sometimes"
		_, err := cfg.WithDefaults()
		if want := `connector: FELDERA_TRANSACTIONS="sometimes": want auto, always or off`; err == nil || err.Error() != want {
			t.Fatalf("err = %v, want %q", err, want)
		}
	})

	// The progress row is written inside Feldera transactions: "on"
	// refuses them off, and "auto" is off with them.
	t.Run("ProgressTable", func(t *testing.T) {
		for _, c := range []struct{ txns, progress, want, err string }{
			{"auto", "on", "on", ""},
			{"off", "auto", "off", ""},
			{"off", "", "off", ""},
			{"auto", "", "auto", ""}, // the default
			{"off", "on", "", "FELDERA_PROGRESS_TABLE=on writes the progress row inside Feldera transactions"},
			{"auto", "sometimes", "", `FELDERA_PROGRESS_TABLE="sometimes": want auto, on or off`},
		} {
			cfg := base
			cfg.Transactions, cfg.ProgressTable = c.txns, c.progress
			got, err := cfg.WithDefaults()
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Errorf("%+v: err %v, want %q", c, err, c.err)
				}
				continue
			}
			if err != nil || got.ProgressTable != c.want {
				t.Errorf("%+v: ProgressTable %q, err %v", c, got.ProgressTable, err)
			}
		}
	})
}
