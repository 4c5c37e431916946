// Package faultproxy is a TCP proxy for fault tests: it sits between a client and a
// redis-server on loopback and breaks the link for real. Freeze stops every byte in both
// directions without closing anything (a partition as a client sees it: writes succeed,
// replies never come); DropReplyAfter lets a chosen command reach the server and then
// drops its reply and closes the client's connection (a reply lost on the way back).
package faultproxy

import (
	"bytes"
	"net"
	"sync"
	"testing"
)

// Proxy forwards connections from Addr to a target address.
type Proxy struct {
	Addr string // host:port clients connect to

	target string
	ln     net.Listener

	mu       sync.Mutex
	frozen   bool          // guarded by mu
	thaw     chan struct{} // closed by Thaw; guarded by mu
	dropOn   []byte        // command bytes whose reply is dropped, nil for none; guarded by mu
	dropLeft int           // how many more replies to drop; guarded by mu
	dropped  int           // replies dropped so far; guarded by mu
	turns    int           // client writes that followed a reply (round trips); guarded by mu
	conns    map[net.Conn]bool
}

// Start listens on a free loopback port and forwards to target until the test ends.
func Start(tb testing.TB, target string) *Proxy {
	tb.Helper()
	return StartOn(tb, "127.0.0.1:0", target)
}

// StartOn is Start on a given address: a test that points a client at an address where
// nothing listens yet (a server that is down) brings the server up there later.
func StartOn(tb testing.TB, addr, target string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, ln: ln, thaw: make(chan struct{}), conns: map[net.Conn]bool{}}
	go p.accept()
	tb.Cleanup(p.Close)
	return p
}

// Close stops listening and closes every connection.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.Thaw()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
}

// Freeze stops forwarding in both directions; bytes wait in the proxy until Thaw.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.frozen {
		p.frozen = true
		p.thaw = make(chan struct{})
	}
}

// Thaw resumes forwarding, delivering what waited.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen {
		p.frozen = false
		close(p.thaw)
	}
}

// DropReplyAfter arms the proxy: the next n client writes that contain marker are
// forwarded to the server, but the server's reply is discarded and the client's
// connection closed, as if the reply was lost on the way back.
func (p *Proxy) DropReplyAfter(marker []byte, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropOn, p.dropLeft = append([]byte(nil), marker...), n
}

// RoundTrips returns how many times a client wrote after the server had answered it, over
// every link so far: the round trips of a request-reply protocol (each client's first
// write, before any answer, is not counted; a protocol whose server speaks first, such as
// a PostgreSQL login, counts that exchange too).
func (p *Proxy) RoundTrips() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.turns
}

// Dropped returns how many replies were dropped.
func (p *Proxy) Dropped() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropped
}

// gate blocks while the proxy is frozen.
func (p *Proxy) gate() {
	p.mu.Lock()
	frozen, thaw := p.frozen, p.thaw
	p.mu.Unlock()
	if frozen {
		<-thaw
	}
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[s] = true, true
		p.mu.Unlock()
		l := &link{p: p, client: c, server: s}
		go l.up()
		go l.down()
	}
}

// link is one proxied connection.
type link struct {
	p      *Proxy
	client net.Conn
	server net.Conn

	mu       sync.Mutex
	dropNext bool // the reply to the last forwarded write is to be dropped; guarded by mu
	answered bool // the server wrote since the client last did; guarded by mu
}

func (l *link) close() {
	_ = l.client.Close()
	_ = l.server.Close()
	l.p.mu.Lock()
	delete(l.p.conns, l.client)
	delete(l.p.conns, l.server)
	l.p.mu.Unlock()
}

// up forwards client -> server, marking the link when a write carries the drop marker.
func (l *link) up() {
	l.pump(l.client, l.server, func(b []byte) bool {
		l.mu.Lock()
		turn := l.answered
		l.answered = false
		l.mu.Unlock()
		l.p.mu.Lock()
		if turn {
			l.p.turns++
		}
		if l.p.dropLeft > 0 && bytes.Contains(b, l.p.dropOn) {
			l.p.dropLeft--
			l.mu.Lock()
			l.dropNext = true
			l.mu.Unlock()
		}
		l.p.mu.Unlock()
		return true
	})
}

// down forwards server -> client, unless the reply is to be dropped.
func (l *link) down() {
	l.pump(l.server, l.client, func([]byte) bool {
		l.mu.Lock()
		drop := l.dropNext
		l.answered = true
		l.mu.Unlock()
		if drop {
			l.p.mu.Lock()
			l.p.dropped++
			l.p.mu.Unlock()
			return false // the reply is lost and the client sees its connection close
		}
		return true
	})
}

// pump forwards from src to dst, waiting while the proxy is frozen, until either side
// fails or pass refuses a chunk; then it closes the link.
func (l *link) pump(src, dst net.Conn, pass func([]byte) bool) {
	defer l.close()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			l.p.gate()
			if !pass(buf[:n]) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
