package outbox

import (
	"context"
	"errors"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/engine"
)

// With min_replicas = 1 a relay round WAITs for the replica once before it marks its rows
// PUBLISHED. With the replica stopped, the rows are appended but not marked, and the relay
// says why (Drain's error, Run's log line); once the replica is back they are marked
// without a second append.
func TestRelayWaitsForReplicas(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d Dialect) {
		e := newEnv(t, d, domainOpts{})
		replica := redistest.StartReplica(t, e.srv)
		ctx := context.Background()
		for n := range 3 {
			e.enqueue(t, Event{Type: "OrderPlaced", Data: orderData("c-1", n)})
			e.enqueue(t, Event{Type: "OrderPlaced", Data: orderData("c-2", n)})
		}
		waits := func() int64 { return redistest.CommandCalls(t, e.rdb, "wait") }
		replicated := func(c *RelayConfig) { c.MinReplicas, c.ReplicaTimeout = 1, time.Second }

		before := waits()
		res, err := e.relay(t, nil, replicated).Drain(ctx)
		if err != nil || res.Published != 6 {
			t.Fatalf("Drain = %+v, %v; want 6 published", res, err)
		}
		n := waits() - before
		t.Logf("one round of 6 rows: %d WAIT call(s)", n)
		if n != 1 {
			t.Errorf("WAIT calls = %d, want 1 (one per round that appended rows)", n)
		}
		if got := e.countStatus(t, StatusPublished); got != 6 {
			t.Fatalf("%d rows published, want 6", got)
		}

		// The replica goes away: two more rows are appended but stay unpublished.
		replica.Stop()
		late := []string{
			e.enqueue(t, Event{Type: "OrderPlaced", Data: orderData("c-1", 3)}).EventID,
			e.enqueue(t, Event{Type: "OrderPlaced", Data: orderData("c-2", 3)}).EventID,
		}
		_, err = e.relay(t, nil, replicated).Drain(ctx)
		var se *engine.ReplicaShortfallError
		if !errors.As(err, &se) || se.Want != 1 || se.Got != 0 {
			t.Fatalf("Drain with the replica down: err = %v, want a *engine.ReplicaShortfallError 0 of 1", err)
		}
		t.Logf("Drain with the replica down: %v", err)
		for _, id := range late {
			rw := e.row(t, id)
			if rw.Status == StatusPublished || !strings.Contains(rw.LastError, "replica shortfall") {
				t.Errorf("row %s: status %s, last error %q; want unpublished with the shortfall as the reason", id, rw.Status, rw.LastError)
			}
		}
		var logs testkit.Buffer
		r := e.relay(t, nil, func(c *RelayConfig) {
			replicated(c)
			c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		})
		stop := run(t, r)
		testkit.WaitFor(t, 5*time.Second, "the relay to log the shortfall", func() bool {
			return strings.Contains(logs.String(), "0 of the 1 required replicas")
		})
		stop()
		line := linesWith(logs.String(), "replica shortfall")[0]
		t.Logf("relay log: %s", line)
		if !regexp.MustCompile(`[12] rows? of category \\"order\\" appended but left unpublished`).MatchString(line) {
			t.Errorf("log line %q: want the row count and the category", line)
		}
		if got := r.Stats().Unreplicated; got == 0 {
			t.Errorf("Stats().Unreplicated = 0, want the rows counted")
		}
		if got := e.countStatus(t, StatusPublished); got != 6 {
			t.Errorf("%d rows published with the replica down, want still 6", got)
		}

		// The replica is back: the rows are marked, each appended once.
		replica.StartAgain()
		replica.WaitLinkUp(t)
		testkit.WaitFor(t, 5*time.Second, "every row published", func() bool {
			if _, err := e.relay(t, nil, replicated).Drain(ctx); err != nil {
				t.Logf("Drain: %v", err)
			}
			return e.countStatus(t, StatusPublished) == 8
		})
		for _, key := range []string{"c-1", "c-2"} {
			var ns []int
			for _, en := range e.stream(t, "order:"+key) {
				ns = append(ns, en.N)
			}
			if len(ns) != 4 || ns[0] != 0 || ns[3] != 3 {
				t.Errorf("stream order:%s holds n = %v, want 0 1 2 3, each once", key, ns)
			}
		}
	})
}

// With min_replicas = 0 (the default) the relay never waits, even with a replica.
func TestRelayNoWaitWithoutMinReplicas(t *testing.T) {
	e := newEnv(t, SQLite, domainOpts{})
	redistest.StartReplica(t, e.srv)
	e.enqueue(t, Event{Type: "OrderPlaced", Data: orderData("c-1", 0)})
	before := redistest.CommandCalls(t, e.rdb, "wait")
	if res, err := e.relay(t, nil, nil).Drain(context.Background()); err != nil || res.Published != 1 {
		t.Fatalf("Drain = %+v, %v", res, err)
	}
	if n := redistest.CommandCalls(t, e.rdb, "wait") - before; n != 0 {
		t.Errorf("WAIT calls = %d with MinReplicas 0, want none", n)
	}
}

func TestRelayConfigReplicas(t *testing.T) {
	e := newEnv(t, SQLite, domainOpts{})
	for _, tt := range []struct {
		name string
		cfg  RelayConfig
		want string
	}{
		{"negative", RelayConfig{Publisher: e.broker, MinReplicas: -1}, "MinReplicas must be 0"},
		{"publisher without a client", RelayConfig{Publisher: publisherFunc(nil), MinReplicas: 1}, "exposes its Redis client"},
		{"timeout not below the lease", RelayConfig{Publisher: e.broker, MinReplicas: 1, ReplicaTimeout: 2 * time.Second, LeaseTTL: time.Second}, "below the relay's LeaseTTL"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewRelay(e.ob, tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("NewRelay = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// publisherFunc is a Publisher that exposes no Redis client.
type publisherFunc func(context.Context, engine.Route, engine.Event, int64) (engine.Published, error)

func (f publisherFunc) PublishRouted(ctx context.Context, r engine.Route, ev engine.Event, seq int64) (engine.Published, error) {
	return f(ctx, r, ev, seq)
}

// linesWith returns the lines of s that contain substr.
func linesWith(s, substr string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return out
}
