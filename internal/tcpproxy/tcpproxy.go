// Package tcpproxy is a loopback TCP proxy for tests that must see a
// connection go silent: Freeze stops forwarding on every connection open
// now, in both directions, without closing it (what a NAT or load
// balancer that dropped a flow does, or an address that failed over and no
// longer answers), while new connections are forwarded as usual.
//
// A Proxy starts one goroutine to accept and two per connection; Close
// stops them all and closes every connection. It is safe for concurrent
// use.
package tcpproxy

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// Proxy forwards connections from its loopback address to a target.
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	conns  []*pair // open and forwarding
	frozen []*pair // open and silent until Close
	closed bool
	done   chan struct{} // closed by Close
	wg     sync.WaitGroup
}

type pair struct {
	client, server net.Conn
	frozen         chan struct{} // closed by Freeze: stop forwarding
	once           sync.Once
	down           atomic.Int64 // bytes forwarded from the server
}

// Start listens on a free loopback port and forwards to target
// (host:port).
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, done: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port is the proxy's port.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		pr := &pair{client: c, server: s, frozen: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			s.Close()
			return
		}
		p.conns = append(p.conns, pr)
		p.wg.Add(2)
		p.mu.Unlock()
		go p.pipe(pr, s, c, nil)
		go p.pipe(pr, c, s, &pr.down)
	}
}

// pipe copies from src to dst until either closes or the pair freezes; a
// frozen pair drops what it read last, reads nothing more, and keeps both
// connections open until Close.
func (p *Proxy) pipe(pr *pair, dst, src net.Conn, count *atomic.Int64) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		select {
		case <-pr.frozen:
			<-p.done
			return
		default:
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
			if count != nil {
				count.Add(int64(n))
			}
		}
		if err != nil {
			if err != io.EOF {
				dst.Close()
			} else if tc, ok := dst.(*net.TCPConn); ok {
				tc.CloseWrite()
			}
			return
		}
	}
}

// Freeze stops forwarding on every connection open now, in both
// directions, and leaves them open; it returns how many it froze.
func (p *Proxy) Freeze() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pr := range p.conns {
		pr.once.Do(func() { close(pr.frozen) })
	}
	n := len(p.conns)
	p.frozen = append(p.frozen, p.conns...)
	p.conns = nil
	return n
}

// FreezeBusiest freezes the one open connection that has carried the most
// bytes from the server (a COPY's, say, beside a quiet one), and reports
// whether there was one.
func (p *Proxy) FreezeBusiest() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	best := -1
	for i, pr := range p.conns {
		if best < 0 || pr.down.Load() > p.conns[best].down.Load() {
			best = i
		}
	}
	if best < 0 {
		return false
	}
	pr := p.conns[best]
	pr.once.Do(func() { close(pr.frozen) })
	p.frozen = append(p.frozen, pr)
	p.conns = append(p.conns[:best], p.conns[best+1:]...)
	return true
}

// Close stops the proxy, closes every connection and waits for its
// goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	close(p.done)
	for _, pr := range append(p.conns, p.frozen...) {
		pr.client.Close()
		pr.server.Close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}
