package outbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/engine"
)

// The crash test runs a relay in a separate OS process: the test binary itself, re-executed
// with helperEnv set, relays until its n-th append has returned and then exits with status 1
// before marking the row, the window between XADD and the UPDATE.
const (
	helperEnv        = "SEQCTL_OUTBOX_TEST_HELPER"
	helperDSN        = "SEQCTL_OUTBOX_HELPER_DSN"
	helperRedis      = "SEQCTL_OUTBOX_HELPER_REDIS"
	helperCrashAfter = "SEQCTL_OUTBOX_HELPER_CRASH_AFTER"
)

// crashExit is the helper's exit status when it crashed as planned.
const crashExit = 1

func helperMain() int {
	crashAfter, _ := strconv.Atoi(os.Getenv(helperCrashAfter))
	db, d, err := Open(os.Getenv(helperDSN))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer db.Close()
	ob, err := New(db, d, testDomain(nopTB{}, domainOpts{}))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	opt, err := redis.ParseURL(os.Getenv(helperRedis))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	r, err := NewRelay(ob, RelayConfig{
		Publisher: engine.NewRedisBroker(rdb), Owner: "doomed", LeaseTTL: 300 * time.Millisecond, Concurrency: 1,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var n atomic.Int64
	r.afterPublish = func(ev engine.Event, p engine.Published) {
		if n.Add(1) == int64(crashAfter) {
			fmt.Fprintf(os.Stderr, "crashing after appending %s as %s\n", ev.ID, p.EntryID)
			os.Exit(crashExit)
		}
	}
	if _, err := r.Drain(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Fprintf(os.Stderr, "drained after %d appends without crashing\n", n.Load())
	return 3
}

// nopTB lets the helper process reuse testDomain outside a test.
type nopTB struct{ testing.TB }

func (nopTB) Helper()           {}
func (nopTB) Fatal(args ...any) { fmt.Fprintln(os.Stderr, args...); os.Exit(2) }
func (nopTB) Fatalf(f string, args ...any) {
	fmt.Fprintf(os.Stderr, f+"\n", args...)
	os.Exit(2)
}

// A relay killed between the append and the row update; after a restart every
// event is in its stream exactly once, and the rows record the right entry ids.
func TestRelayCrashBetweenAppendAndMarkPublishesOnce(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d Dialect) {
		e := newEnv(t, d, domainOpts{})
		audit := e.enqueue(t, Event{Type: "AuditLogged", Data: []byte(`{"msg":"hello"}`)})
		var c1, c2 []Enqueued
		for n := 1; n <= 3; n++ {
			c1 = append(c1, e.enqueue(t, Event{Type: "OrderPlaced", Data: orderData("c-1", n)}))
			if n <= 2 {
				c2 = append(c2, e.enqueue(t, Event{Type: "OrderPlaced", Data: orderData("c-2", n)}))
			}
		}

		// Categories go in name order (audit first, in a round of its own), then the units
		// of "order" one at a time: the 4th append is c-1's last row.
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), helperEnv+"=1", helperDSN+"="+e.dsn, helperRedis+"="+e.srv.URL, helperCrashAfter+"=4")
		out, err := cmd.CombinedOutput()
		var xe *exec.ExitError
		if !errors.As(err, &xe) || xe.ExitCode() != crashExit {
			t.Fatalf("helper relay: want exit status %d (crashed in the window), got %v; output:\n%s", crashExit, err, out)
		}
		if got := len(e.stream(t, "order:c-1")); got != 3 {
			t.Fatalf("after the crash, order:c-1 has %d entries, want 3 (appended, not marked)", got)
		}
		if got := e.countStatus(t, StatusPublished); got != 1 {
			t.Fatalf("after the crash, %d rows are PUBLISHED, want 1 (the audit row of the earlier round)", got)
		}

		// A new relay takes over once the dead one's lease expires.
		r := e.relay(t, nil, nil)
		var total DrainResult
		testkit.WaitFor(t, 10*time.Second, "the new relay to publish every row", func() bool {
			res, err := r.Drain(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			total.Published += res.Published
			total.Duplicates += res.Duplicates
			return e.countStatus(t, StatusPublished) == 6
		})
		if diff := cmp.Diff(DrainResult{Published: 2, Duplicates: 3}, total); diff != "" {
			t.Errorf("new relay's work (-want +got):\n%s", diff)
		}
		for _, tc := range []struct {
			stream string
			rows   []Enqueued
		}{{"audit", []Enqueued{audit}}, {"order:c-1", c1}, {"order:c-2", c2}} {
			got := e.stream(t, tc.stream)
			var want []entry
			for i, en := range tc.rows {
				row := e.row(t, en.EventID)
				n := i + 1
				if tc.stream == "audit" {
					n = 0
				}
				want = append(want, entry{EntryID: row.EntryID, EventID: en.EventID, Key: en.Key, N: n})
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("stream %s: each event once, in order, with the entry id its row records (-want +got):\n%s", tc.stream, diff)
			}
		}
	})
}
