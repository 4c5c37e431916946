// Package redistest starts private redis-server processes for tests.
//
// Each Server runs on a free 127.0.0.1 port in its own temporary directory with
// persistence off, so fault tests can stop (SIGKILL), pause (SIGSTOP) and restart it. A
// port another process takes before redis-server binds it is picked again (StartWith).
// When SEQCTL_TEST_REDIS_URL is set, Start returns a server that points at that URL
// instead, with its own key-namespace database flushed; fault operations then skip the
// test, since they cannot be done on a server the test does not own.
package redistest

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// EnvURL names the variable that points tests at an existing Redis.
const EnvURL = "SEQCTL_TEST_REDIS_URL"

// Server is one redis-server a test owns (or the external one from EnvURL).
type Server struct {
	Addr string // host:port
	URL  string // redis://host:port/db, rediss:// with Options.TLS
	// TLS holds the certificate files of a server started with Options.TLS; nil otherwise.
	TLS *TLSFiles

	tb       testing.TB
	external bool
	dir      string
	port     int
	bus      int // the cluster bus port with Options.clusterBus, else 0
	opts     Options

	mu  sync.Mutex
	cmd *exec.Cmd // guarded by mu
}

// Binary returns the redis-server path, or an error that says how to install it.
func Binary() (string, error) {
	if p := os.Getenv("SEQCTL_REDIS_SERVER"); p != "" {
		return p, nil
	}
	p, err := exec.LookPath("redis-server")
	if err != nil {
		return "", fmt.Errorf("redis-server not found on PATH: install it (Debian: apt-get install redis-server; macOS: brew install redis), or set %s to an existing Redis", EnvURL)
	}
	return p, nil
}

// Options change how a private server runs.
type Options struct {
	// AOF turns on the append-only file with appendfsync always, so a Restart reloads
	// every acknowledged write (the default runs with persistence off: a restart loses
	// everything).
	AOF bool
	// Args are extra redis-server arguments, e.g. "--maxmemory", "2mb" or "--replicaof",
	// "127.0.0.1", "6379".
	Args []string
	// TLS serves TLS only (--port 0, --tls-port), with a CA, server and client
	// certificates generated for the test (Server.TLS) and client certificates required
	// (--tls-auth-clients yes).
	TLS bool
	// Users are ACL users, each an "ACL SETUSER" line or its rules alone
	// ("worker on >pw ~order:* +@all"), loaded from an ACL file at every start. The
	// default user keeps every permission.
	Users []string

	// clusterBus gives the server a cluster bus port of its own (--cluster-port), picked
	// with its port and picked again with it when either is taken at start.
	clusterBus bool
}

// Start starts a private redis-server for the test and stops it at cleanup.
func Start(tb testing.TB) *Server { tb.Helper(); return StartWith(tb, Options{}) }

// StartWith starts a private redis-server with options. Options need a server the test
// owns: with SEQCTL_TEST_REDIS_URL set, a test that asks for any skips.
func StartWith(tb testing.TB, o Options) *Server {
	tb.Helper()
	if u := os.Getenv(EnvURL); u != "" {
		if o.AOF || len(o.Args) > 0 || o.TLS || len(o.Users) > 0 {
			tb.Skipf("this test needs a private redis-server with options; unset %s to run it", EnvURL)
		}
		opt, err := redis.ParseURL(u)
		if err != nil {
			tb.Fatalf("%s=%q: %v", EnvURL, u, err)
		}
		s := &Server{Addr: opt.Addr, URL: u, tb: tb, external: true}
		c := redis.NewClient(opt)
		defer c.Close()
		if err := c.FlushDB(context.Background()).Err(); err != nil {
			tb.Fatalf("flush %s: %v", u, err)
		}
		return s
	}
	bin, err := Binary()
	if err != nil {
		tb.Fatal(err)
	}
	s := &Server{tb: tb, dir: tb.TempDir(), opts: o}
	if o.TLS {
		s.TLS = WriteTLSFiles(tb, s.dir)
	}
	tb.Cleanup(s.Kill)
	// A free port is free when freePort closes its listener, not when redis-server
	// binds it a moment later: another process (a parallel test package, an outgoing
	// connection's ephemeral port) may take it in between. Pick again when that happens.
	for try := 1; ; try++ {
		s.setPorts(pickPort(tb))
		if o.clusterBus {
			s.bus = pickPort(tb)
		}
		err := s.startProc(bin)
		if err == nil {
			return s
		}
		if try == startTries {
			tb.Fatalf("%v (tried %d pairs of free ports)", err, try)
		}
		tb.Logf("%v; picking other ports", err)
		_ = os.Remove(filepath.Join(s.dir, "nodes.conf")) // a cluster node's, naming the taken ports
	}
}

// startTries bounds how often a start is tried again when its port was taken.
const startTries = 5

func (s *Server) setPorts(port int) {
	s.port = port
	s.Addr = "127.0.0.1:" + strconv.Itoa(port)
	s.URL = "redis://" + s.Addr + "/0"
	if s.TLS != nil {
		s.URL = "rediss://" + s.Addr + "/0"
	}
}

// pickPort picks a port for a server to start on; a test of the retry replaces it.
var pickPort = freePort

func freePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// errPortTaken is what startProc returns when redis-server could not bind its port (or
// its cluster bus port) because another process holds it.
type errPortTaken struct{ addr, log string }

func (e errPortTaken) Error() string {
	return fmt.Sprintf("redis-server on %s found its port taken at start; log:\n%s", e.addr, e.log)
}

// startProc starts redis-server and waits until it answers. It fails the test on any
// trouble but one: a port taken by another process, returned as errPortTaken so that
// the caller can pick another port or wait.
func (s *Server) startProc(bin string) error {
	s.tb.Helper()
	args := []string{
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--dir", s.dir,
		"--logfile", filepath.Join(s.dir, "redis.log"),
		"--daemonize", "no", "--protected-mode", "no"}
	if s.opts.AOF {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		args = append(args, "--appendonly", "no")
	}
	if s.TLS != nil {
		args = append(args, s.tlsArgs()...) // the later --port 0 wins
	}
	if len(s.opts.Users) > 0 {
		args = append(args, "--aclfile", s.writeACLFile())
	}
	if s.bus != 0 {
		args = append(args, "--cluster-port", strconv.Itoa(s.bus))
	}
	cmd := exec.Command(bin, append(args, s.opts.Args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		s.tb.Fatalf("start redis-server: %v", err)
	}
	s.mu.Lock()
	s.cmd = cmd
	s.mu.Unlock()
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited: // a bad argument or ACL file: say so now, not in 10 s
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			if strings.Contains(string(log), "Address already in use") {
				_ = os.Remove(filepath.Join(s.dir, "redis.log")) // the next try's log alone
				return errPortTaken{s.Addr, string(log)}
			}
			s.tb.Fatalf("redis-server on %s exited at start; log:\n%s", s.Addr, log)
		default:
		}
		c, err := net.DialTimeout("tcp", s.Addr, 100*time.Millisecond)
		if err == nil && s.TLS != nil {
			tc := tls.Client(c, s.TLS.ClientConfig(s.tb))
			_ = tc.SetDeadline(time.Now().Add(time.Second))
			if err = tc.Handshake(); err != nil {
				c.Close()
			} else {
				c = tc
			}
		}
		if err == nil {
			_, _ = c.Write([]byte("PING\r\n"))
			_ = c.SetReadDeadline(time.Now().Add(time.Second))
			line, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if strings.HasPrefix(line, "+PONG") || strings.HasPrefix(line, "-NOAUTH") { // up (with --requirepass)
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	s.tb.Fatalf("redis-server on %s did not answer within 10s; log:\n%s", s.Addr, log)
	return nil
}

// Client returns a new client for the server, closed at cleanup.
func (s *Server) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	opt, err := redis.ParseURL(s.URL)
	if err != nil {
		tb.Fatal(err)
	}
	if s.TLS != nil {
		opt.TLSConfig = s.TLS.ClientConfig(tb)
	}
	c := redis.NewClient(opt)
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

func (s *Server) needOwned() {
	s.tb.Helper()
	if s.external {
		s.tb.Skipf("fault injection needs a private redis-server; unset %s to run it", EnvURL)
	}
}

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}

// Kill stops the server at once (SIGKILL); its data is lost. Safe to call twice.
func (s *Server) Kill() {
	if s.external {
		return
	}
	s.signal(syscall.SIGKILL)
	s.mu.Lock()
	s.cmd = nil
	s.mu.Unlock()
}

// Pause freezes the server (SIGSTOP).
func (s *Server) Pause() { s.needOwned(); s.signal(syscall.SIGSTOP) }

// Resume thaws a paused server (SIGCONT).
func (s *Server) Resume() { s.needOwned(); s.signal(syscall.SIGCONT) }

// Dir is the server's working directory (its log, and its AOF with Options.AOF).
func (s *Server) Dir() string { return s.dir }

// Port is the server's TCP port.
func (s *Server) Port() int { return s.port }

// Stop kills the server (SIGKILL) and leaves it down until Start is called: a restart
// in two steps, for tests that keep Redis down for a while.
func (s *Server) Stop() { s.needOwned(); s.Kill() }

// StartAgain starts the stopped server on the same port and directory. With Options.AOF
// it reloads the append-only file; otherwise it is empty.
func (s *Server) StartAgain() {
	s.tb.Helper()
	s.needOwned()
	bin, err := Binary()
	if err != nil {
		s.tb.Fatal(err)
	}
	s.startSamePorts(bin)
}

// startSamePorts starts the server again on the ports it had. Another process may hold
// one of them for a moment (an outgoing connection's ephemeral port): wait for it, up to
// 5 s.
func (s *Server) startSamePorts(bin string) {
	s.tb.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := s.startProc(bin)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.tb.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Restart kills the server and starts it again on the same port: empty, or from its
// append-only file with Options.AOF.
func (s *Server) Restart() {
	s.tb.Helper()
	s.needOwned()
	s.Kill()
	bin, err := Binary()
	if err != nil {
		s.tb.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	s.startSamePorts(bin)
}

// UserURL is the server's URL with a user name and password, for an ACL user of
// Options.Users.
func (s *Server) UserURL(user, password string) string {
	scheme, rest, _ := strings.Cut(s.URL, "://")
	return scheme + "://" + url.UserPassword(user, password).String() + "@" + rest
}
