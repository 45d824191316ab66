// Package ftconfig reads a Feldera pipeline's fault-tolerance setting
// (runtime_config.fault_tolerance and checkpoint_interval_secs) the way
// Feldera's FtConfig does, with its own parser, independent of the
// client's: whether a restart keeps completed state, the model (none,
// at_least_once, exactly_once), and how often a checkpoint is taken. It
// starts no goroutines; a Setting is a value, safe for concurrent use.
package ftconfig
