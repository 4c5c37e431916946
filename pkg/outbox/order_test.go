package outbox

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/engine"
)

// flaky wraps the Redis broker and fails every publish of one key while that key is set.
// Embedding keeps Client(), so the relay can still resolve deduplicated entries.
type flaky struct {
	*engine.RedisBroker
	mu      sync.Mutex
	failKey string         // guarded by mu
	tries   map[string]int // publish attempts per key; guarded by mu
}

var errInjected = errors.New("injected publish failure")

func (f *flaky) fail(key string) {
	f.mu.Lock()
	f.failKey = key
	f.mu.Unlock()
}

func (f *flaky) attempts(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tries[key]
}

func (f *flaky) PublishRouted(ctx context.Context, r engine.Route, ev engine.Event, seq int64) (engine.Published, error) {
	f.mu.Lock()
	if f.tries == nil {
		f.tries = map[string]int{}
	}
	f.tries[ev.Key]++
	failing := f.failKey != "" && ev.Key == f.failKey
	f.mu.Unlock()
	if failing {
		return engine.Published{}, errInjected
	}
	return f.RedisBroker.PublishRouted(ctx, r, ev, seq)
}

// A key whose head fails holds its later rows back while other keys flow;
// once the failure clears, the held rows go out in commit order.
func TestFailingRowHoldsBackItsKeyOnly(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d Dialect) {
		e := newEnv(t, d, domainOpts{})
		pub := &flaky{RedisBroker: e.broker}
		pub.fail("c-1")
		var c1, c2 []string
		for n := 1; n <= 3; n++ { // commit order: c-1/1, c-2/1, c-1/2, c-2/2, ...
			c1 = append(c1, e.enqueue(t, Event{Type: "OrderPlaced", Data: orderData("c-1", n)}).EventID)
			c2 = append(c2, e.enqueue(t, Event{Type: "OrderShipped", Data: orderData("c-2", n)}).EventID)
		}
		run(t, e.relay(t, pub, nil))

		testkit.WaitFor(t, 10*time.Second, "c-2 published and c-1's head retried twice", func() bool {
			return len(e.stream(t, "order:c-2")) == 3 && pub.attempts("c-1") >= 3
		})
		if got := e.stream(t, "order:c-1"); len(got) != 0 {
			t.Fatalf("order:c-1 got %d entries while its head fails", len(got))
		}
		head := e.row(t, c1[0])
		if head.Status != StatusFailed || head.Attempts < 2 || !strings.Contains(head.LastError, errInjected.Error()) {
			t.Errorf("c-1 head: %+v; want FAILED with attempts >= 2 and the injected error", head)
		}
		for _, id := range c1[1:] {
			if r := e.row(t, id); r.Status != StatusPending || r.Attempts != 0 {
				t.Errorf("c-1 row behind the head: %+v; want PENDING, never attempted", r)
			}
		}

		pub.fail("")
		testkit.WaitFor(t, 10*time.Second, "c-1 published after the failure cleared", func() bool {
			return len(e.stream(t, "order:c-1")) == 3
		})
		for key, ids := range map[string][]string{"order:c-1": c1, "order:c-2": c2} {
			var got []string
			for _, en := range e.stream(t, key) {
				got = append(got, en.EventID)
			}
			if diff := cmp.Diff(ids, got); diff != "" {
				t.Errorf("%s in commit order (-want +got):\n%s", key, diff)
			}
		}
	})
}

// A failing key with a backlog far longer than a batch (and than the scan window) must not
// hide other keys' rows; and the rows waiting behind the failure keep no dedupe sequence.
func TestLongBacklogBehindFailingKeyDoesNotStarveOtherKeys(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d Dialect) {
		e := newEnv(t, d, domainOpts{})
		pub := &flaky{RedisBroker: e.broker}
		pub.fail("stuck")
		ctx := context.Background()
		tx, err := e.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for n := 1; n <= 100; n++ {
			if _, err := e.ob.Enqueue(ctx, tx, Event{Type: "OrderPlaced", Data: orderData("stuck", n)}); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		// BatchSize 8: a round reads at most 32 sequenced rows and scans at most 32 others.
		r := e.relay(t, pub, func(c *RelayConfig) { c.BatchSize = 8 })
		if _, err := r.Drain(ctx); err != nil { // the head fails; the rest wait
			t.Fatal(err)
		}
		var free []string
		for n := 1; n <= 5; n++ {
			free = append(free, e.enqueue(t, Event{Type: "OrderPlaced", Data: orderData("free", n)}).EventID)
		}
		testkit.WaitFor(t, 10*time.Second, "the other key published", func() bool {
			if _, err := r.Drain(ctx); err != nil {
				t.Fatal(err)
			}
			return len(e.stream(t, "order:free")) == 5
		})
		var sequenced int
		if err := e.db.QueryRow("SELECT count(*) FROM seqctl_outbox WHERE status IN ('PENDING', 'FAILED') AND publish_seq IS NOT NULL").Scan(&sequenced); err != nil {
			t.Fatal(err)
		}
		if sequenced != 1 {
			t.Errorf("%d unpublished rows hold a dedupe sequence; want 1 (the failing head)", sequenced)
		}
		if got := len(e.stream(t, "order:stuck")); got != 0 {
			t.Errorf("order:stuck has %d entries while its head fails", got)
		}
	})
}
