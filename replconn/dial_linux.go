package replconn

import (
	"syscall"
	"time"
)

// tcpUserTimeout is TCP_USER_TIMEOUT from linux/tcp.h: how long sent data
// may stay unacknowledged before the kernel aborts the connection.
const tcpUserTimeout = 0x12

func setUserTimeout(fd uintptr, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	return syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpUserTimeout, int(d.Milliseconds()))
}
