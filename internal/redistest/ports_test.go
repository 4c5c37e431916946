package redistest

import (
	"context"
	"net"
	"os"
	"testing"
)

// holdPort holds a loopback port for the rest of the test and returns it.
func holdPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l.Addr().(*net.TCPAddr).Port
}

// pickFirst makes pickPort hand out ports first, then free ones.
func pickFirst(t *testing.T, ports ...int) {
	t.Helper()
	if os.Getenv(EnvURL) != "" {
		t.Skipf("needs private redis-servers; unset %s", EnvURL)
	}
	old := pickPort
	pickPort = func(tb testing.TB) int {
		if len(ports) > 0 {
			p := ports[0]
			ports = ports[1:]
			return p
		}
		return freePort(tb)
	}
	t.Cleanup(func() { pickPort = old })
}

// A port that another process takes between the pick and redis-server's bind costs a
// second pick, not the test.
func TestStartPicksAgainWhenItsPortIsTaken(t *testing.T) {
	taken := holdPort(t)
	pickFirst(t, taken)
	s := Start(t)
	if s.Port() == taken {
		t.Fatalf("the server claims the held port %d", taken)
	}
	if err := s.Client(t).Ping(context.Background()).Err(); err != nil {
		t.Fatalf("ping the server started on the second pick: %v", err)
	}
}

// The same for a cluster node whose bus port is taken: its client port binds, its bus
// port does not, and the node exits at start.
func TestClusterNodePicksAgainWhenItsBusPortIsTaken(t *testing.T) {
	taken := holdPort(t)
	pickFirst(t, freePort(t), taken)
	s := StartWith(t, Options{clusterBus: true, Args: []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"}})
	if s.bus == taken {
		t.Fatalf("the node claims the held bus port %d", taken)
	}
	if err := s.Client(t).Ping(context.Background()).Err(); err != nil {
		t.Fatalf("ping the node started on the second pick: %v", err)
	}
}
