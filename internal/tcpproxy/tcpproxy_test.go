package tcpproxy_test

import (
	"bufio"
	"net"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/internal/tcpproxy"
)

// Forwarded both ways; after Freeze an open connection gets nothing and
// is not closed, while a new one is forwarded.
func TestProxy_Freeze(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { // echo lines
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						c.Close()
						return
					}
					c.Write([]byte(line))
				}
			}()
		}
	}()
	p, err := tcpproxy.Start(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	echo := func(c net.Conn, within time.Duration) (string, error) {
		c.SetDeadline(time.Now().Add(within))
		if _, err := c.Write([]byte("ping\n")); err != nil {
			return "", err
		}
		return bufio.NewReader(c).ReadString('\n')
	}
	c1, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	if got, err := echo(c1, 5*time.Second); err != nil || got != "ping\n" {
		t.Fatalf("forwarded: %q %v", got, err)
	}
	if n := p.Freeze(); n != 1 {
		t.Fatalf("froze %d connections", n)
	}
	got, err := echo(c1, 300*time.Millisecond)
	if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Fatalf("a frozen connection answered %q, %v; want silence (a timeout), not a close", got, err)
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if got, err := echo(c2, 5*time.Second); err != nil || got != "ping\n" {
		t.Fatalf("a new connection after Freeze: %q %v", got, err)
	}
}
