package connector

import (
	"errors"
	"fmt"

	"github.com/pgfeldera/pgfeldera/setup"
)

// transactionDefaults checks FELDERA_TRANSACTIONS and
// FELDERA_PROGRESS_TABLE, and fills in their defaults.
func transactionDefaults(cfg *Config) error {
	switch cfg.Transactions {
	case "":
		cfg.Transactions = TxnAuto
	case TxnAuto, TxnAlways, TxnOff:
	default:
		return fmt.Errorf("connector: FELDERA_TRANSACTIONS=%q: want auto, always or off", cfg.Transactions)
	}
	return progressDefaults(cfg)
}

// progressDefaults checks FELDERA_PROGRESS_TABLE against
// FELDERA_TRANSACTIONS: the row is written inside Feldera transactions,
// so "on" refuses transactions off, and "auto" is off with them.
func progressDefaults(cfg *Config) error {
	switch cfg.ProgressTable {
	case "":
		cfg.ProgressTable = setup.ProgressAuto // declaring the table is the opt-in
	case setup.ProgressAuto, setup.ProgressOn, setup.ProgressOff:
	default:
		return fmt.Errorf("connector: FELDERA_PROGRESS_TABLE=%q: want auto, on or off", cfg.ProgressTable)
	}
	if cfg.Transactions != TxnOff {
		return nil
	}
	if cfg.ProgressTable == setup.ProgressOn {
		return errors.New("connector: FELDERA_PROGRESS_TABLE=on writes the progress row inside Feldera transactions, which FELDERA_TRANSACTIONS=off turns off: set one of them otherwise")
	}
	cfg.ProgressTable = setup.ProgressOff
	return nil
}
