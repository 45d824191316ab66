//go:build !linux

package replconn

import "time"

// setUserTimeout does nothing where TCP_USER_TIMEOUT does not exist: the
// keepalives still end a dead connection.
func setUserTimeout(fd uintptr, d time.Duration) error { return nil }
