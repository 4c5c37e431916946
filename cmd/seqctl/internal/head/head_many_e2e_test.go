package head

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdtest"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/internal/enginetest"
	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/engine"
)

// outageWorld is a real Redis and a running engine of the ops domain whose Projector
// fails every event while down is set (a downstream outage) and records every handled
// seq in "t:log:{key}" once it is cleared.
type outageWorld struct {
	cmdtest.OpsEngine
	srv  *redistest.Server
	rdb  *redis.Client
	down atomic.Bool
}

func startOutageWorld(t *testing.T) *outageWorld {
	t.Helper()
	srv := redistest.Start(t)
	w := &outageWorld{srv: srv, rdb: srv.Client(t)}
	w.down.Store(true)
	_, dom := cmdtest.LoadDomain(t, cmdtest.WriteDomain(t, "ops"))
	sink := srv.Client(t)
	dom.Handlers[0].Func = func(_ context.Context, ev engine.Event) error {
		var p cmdtest.OpsPayload
		if err := json.Unmarshal(ev.Data, &p); err != nil {
			return err
		}
		if w.down.Load() {
			return errors.New("downstream unavailable")
		}
		return sink.RPush(context.Background(), "t:log:"+p.Client, p.Seq).Err()
	}
	enginetest.Start(t, engine.EngineConfig{Domain: dom, Client: srv.Client(t), InstanceID: "w1"})
	w.OpsEngine = cmdtest.OpsEngine{Dom: dom, Broker: engine.NewRedisBroker(w.rdb)}
	return w
}

// haltKeys publishes one event to each of n keys (k-00, k-01, ...) while the downstream
// is down, waits until seqctl lists the n partitions as halted, then publishes a second
// event to each (held behind the halted head) and brings the downstream back up.
func (w *outageWorld) haltKeys(t *testing.T, n int) (keys []string) {
	t.Helper()
	for i := range n {
		keys = append(keys, fmt.Sprintf("k-%02d", i))
		w.Publish(t, cmdtest.OpsPayload{Client: keys[i], Seq: 0})
	}
	testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("%d partitions halted", n), func() bool {
		r := cmdtest.CLIAt(t, w.srv.URL, "", "partitions", "list", "--halted", "-o", "json")
		var rows []admin.Partition
		return r.Code == 0 && json.Unmarshal([]byte(r.Stdout), &rows) == nil && len(rows) == n
	})
	for _, k := range keys {
		w.Publish(t, cmdtest.OpsPayload{Client: k, Seq: 1})
	}
	w.down.Store(false)
	return keys
}

// drained waits until every key handled its two events, in order.
func (w *outageWorld) drained(t *testing.T, keys []string) {
	t.Helper()
	testkit.WaitFor(t, 30*time.Second, "every partition drained", func() bool {
		for _, k := range keys {
			if fmt.Sprint(w.rdb.LRange(context.Background(), "t:log:"+k, 0, -1).Val()) != "[0 1]" {
				return false
			}
		}
		return true
	})
}

// retriesOK are the times of the audit records of the retries done (outcome ok), in ms,
// sorted, and how many each stream has.
func retriesOK(t *testing.T, url string) (ms []int64, perStream map[string]int) {
	t.Helper()
	perStream = map[string]int{}
	for _, e := range cmdtest.AuditOf(t, url) {
		if e.Command == "head retry" && e.Outcome == admin.OutcomeOK {
			ms = append(ms, e.Time.UnixMilli())
			perStream[e.Stream]++
		}
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i] < ms[j] })
	return ms, perStream
}

// checkOncePerKey fails unless every key's partition was retried exactly once.
func checkOncePerKey(t *testing.T, keys []string, perStream map[string]int) {
	t.Helper()
	for _, k := range keys {
		if n := perStream["order:"+k]; n != 1 {
			t.Errorf("order:%s retried %d times, want once", k, n)
		}
	}
	if len(perStream) != len(keys) {
		t.Errorf("%d streams retried, want %d: %v", len(perStream), len(keys), perStream)
	}
}

// 30 partitions halted by an outage, retried with --rate 10/s once it is over: all 30
// are retried and drain, and the retries' audit records never hold more than 10 in a
// second (see cmdtest.EffectJitterMS) and span at least 2.5 s (29 intervals of 100 ms are 2.9 s).
func TestHeadRetryManyAtRateEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3 s paced retry: skipped with -short")
	}
	w := startOutageWorld(t)
	keys := w.haltKeys(t, 30)

	r := cmdtest.CLIAt(t, w.srv.URL, "", "head", "retry", "--category", "order", "--rate", "10/s", "--yes", "--reason", "ERP back")
	cmdtest.CheckResult(t, r, 0, "", []string{"retried  order:k-00 for Projector, head ", "✓ Retried 30 partitions: each owner tries its head once more now."}, nil)
	w.drained(t, keys)

	ms, perStream := retriesOK(t, w.srv.URL)
	checkOncePerKey(t, keys, perStream)
	if len(ms) != 30 {
		t.Fatalf("%d retries recorded, want 30", len(ms))
	}
	cmdtest.CheckPaced(t, "retries", ms, 10, 2500*time.Millisecond)
	r = cmdtest.CLIAt(t, w.srv.URL, "", "partitions", "list", "--halted", "-o", "json")
	if r.Code != 0 || r.Stdout != "[]\n" {
		t.Errorf("still halted after the retry: exit %d\n%s", r.Code, r.Stdout)
	}
}

var retryStoppedRe = regexp.MustCompile(`stopped after (\d+) of 30; run the same command again to retry the rest \(only the partitions still halted are retried\)`)

// A retry of 30 partitions at 10/s stopped after about 1 s says how far it got and
// records the stop; the same command again retries only the partitions still halted:
// every partition is retried exactly once and all drain.
func TestHeadRetryManyStopAndRestartEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3 s paced retry: skipped with -short")
	}
	w := startOutageWorld(t)
	keys := w.haltKeys(t, 30)
	args := []string{"head", "retry", "--category", "order", "--rate", "10/s", "--yes", "--redis-url", w.srv.URL}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	time.AfterFunc(time.Second, cancel)
	ios, _, out, errOut := cmdutil.NewTestIOStreams()
	code := cmdtest.RunRoot(ctx, &cmdutil.Factory{IOStreams: ios, Build: cmdtest.TestBuild}, args)
	m := retryStoppedRe.FindStringSubmatch(errOut.String())
	if code != cmdutil.ExitFailure || m == nil {
		t.Fatalf("stopped run: exit %d, stderr %q, stdout %q; want exit 1 and the count", code, errOut.String(), out.String())
	}
	done, _ := strconv.Atoi(m[1])
	_, perStream := retriesOK(t, w.srv.URL)
	t.Logf("stopped after %d of 30 (%d retries recorded)", done, len(perStream))
	if done < 5 || done > 20 || len(perStream) != done {
		t.Errorf("stopped after %d with %d retries recorded: want about 10, all accounted for", done, len(perStream))
	}
	detail := fmt.Sprintf("--category order --rate 10/s: stopped by the operator after %d of 30 partitions (%d retried, 0 skipped, 0 refused); %d not tried", done, done, 30-done)
	stops := 0
	for _, e := range cmdtest.AuditOf(t, w.srv.URL) {
		if e.Command == "head retry" && e.Outcome == admin.OutcomeStopped && e.Detail == detail && e.User != "" {
			stops++
		}
	}
	if stops != 1 {
		t.Errorf("%d audit records of the stop %q, want 1", stops, detail)
	}

	r := cmdtest.CLIAt(t, w.srv.URL, "", args[:len(args)-2]...)
	cmdtest.CheckResult(t, r, 0, "", []string{fmt.Sprintf("✓ Retried %d partitions", 30-done)}, nil)
	w.drained(t, keys)
	_, perStream = retriesOK(t, w.srv.URL)
	checkOncePerKey(t, keys, perStream)
}
