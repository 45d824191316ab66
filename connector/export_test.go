package connector

// SetAfterCopyHook runs f after every table was copied and before the
// slot is created (inconsistent mode) or the state saved: tests use it to
// commit rows in exactly that window.
func SetAfterCopyHook(c *Connector, f func()) { c.afterCopy = f }
