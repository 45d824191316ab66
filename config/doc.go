// Package config holds the connector's settings: Config, the plain struct
// connector.New takes (cmd/pgfeldera fills it from flags and the
// environment), its DefaultXxx constants and the values of its modes (ack,
// snapshot, FELDERA_TRANSACTIONS, PG_SLOT_FAILOVER), WithDefaults, which
// checks the required settings and fills in the defaults of the others,
// and Observer, what the connector reports to the metrics.
//
// It starts no goroutines and does no I/O. A Config is a value: a copy
// may be read from any goroutine, and WithDefaults returns a new one. An
// Observer's methods may be called from several goroutines, so an
// implementation must be safe for concurrent use.
//
// It imports no part of package connector, which keeps aliases of its
// names (connector.Config, connector.Observer, connector.AckCompleted, …).
package config
