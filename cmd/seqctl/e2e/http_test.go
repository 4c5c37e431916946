package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/deliver"
	"github.com/seqctl/seqctl/pkg/engine"
)

// sink is the HTTP handler endpoint of the tests: it checks each request's signature,
// records per-key order and overlap, and refuses keys starting with "poison".
type sink struct {
	t       *testing.T
	secret  []byte
	latency time.Duration

	mu         sync.Mutex
	inflight   map[string]bool  // key -> a request is running; guarded by mu
	running    int              // requests running; guarded by mu
	maxRunning int              // guarded by mu
	log        map[string][]int // key -> seqs handled, in order; guarded by mu
	violations []string         // guarded by mu
	generation map[string]int64 // key -> highest generation seen; guarded by mu

	badSignatures atomic.Int64
	requests      atomic.Int64
}

func newSink(t *testing.T, secret string, latency time.Duration) *sink {
	return &sink{t: t, secret: []byte(secret), latency: latency,
		inflight: map[string]bool{}, log: map[string][]int{}, generation: map[string]int64{}}
}

// stepEnvelope is what the test sinks read of a delivered envelope.
type stepEnvelope struct {
	Key  string `json:"key"`
	Data struct {
		Seq int `json:"seq"`
	} `json:"data"`
}

// decodeStep reads a delivered envelope; on a bad one it answers 400 and reports false.
func decodeStep(w http.ResponseWriter, body []byte) (stepEnvelope, bool) {
	var env stepEnvelope
	if err := json.Unmarshal(body, &env); err != nil {
		http.Error(w, "bad envelope: "+err.Error(), http.StatusBadRequest)
		return env, false
	}
	return env, true
}

func (s *sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.requests.Add(1)
	body, _ := io.ReadAll(r.Body)
	if err := deliver.Verify(r, body, s.secret); err != nil {
		s.badSignatures.Add(1)
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	env, ok := decodeStep(w, body)
	if !ok {
		return
	}
	key := r.Header.Get(deliver.HeaderKey)
	gen, _ := strconv.ParseInt(r.Header.Get(deliver.HeaderGeneration), 10, 64)
	s.mu.Lock()
	if key != env.Key {
		s.violations = append(s.violations, "header key "+key+" != envelope key "+env.Key)
	}
	if s.inflight[key] {
		s.violations = append(s.violations, "two events of key "+key+" at once")
	}
	if gen < s.generation[key] {
		s.violations = append(s.violations, "stale generation for key "+key)
	}
	s.generation[key] = max(s.generation[key], gen)
	s.inflight[key] = true
	s.running++
	s.maxRunning = max(s.maxRunning, s.running)
	s.mu.Unlock()

	time.Sleep(s.latency)

	s.mu.Lock()
	s.inflight[key] = false
	s.running--
	poison := strings.HasPrefix(key, "poison")
	if !poison {
		s.log[key] = append(s.log[key][:len(s.log[key]):len(s.log[key])], env.Data.Seq)
	}
	s.mu.Unlock()
	if poison {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, "poison refused: "+strings.Repeat("z", 700))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *sink) snapshot() (map[string][]int, []string, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	log := make(map[string][]int, len(s.log))
	for k, v := range s.log {
		log[k] = append([]int(nil), v...)
	}
	return log, append([]string(nil), s.violations...), s.maxRunning
}

// TestRunHTTPTwoInstancesOrderCrashAndHalt checks the guarantees of the exec test with
// an HTTP handler served by the test (signed requests), and a key whose every answer is
// 500 halts after its retries with the status and a body excerpt as the reason, while
// the other keys keep flowing.
func TestRunHTTPTwoInstancesOrderCrashAndHalt(t *testing.T) {
	s, sinkURL := startSink(t)
	f := newFixture(t, "http.domain.toml", map[string]string{"URL": sinkURL})
	orderCrashAndHalt(t, f, s, nil, nil)
}

// e2eSecret signs the requests of the HTTP tests.
const e2eSecret = "e2e-signing-secret"

// startSink serves a sink for the HTTP tests and returns its URL.
func startSink(t *testing.T) (*sink, string) {
	t.Helper()
	s := newSink(t, e2eSecret, 5*time.Millisecond)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return s, srv.URL + "/steps"
}

// orderCrashAndHalt runs two 'seqctl run' instances (with workerArgs) on f, publishes,
// SIGKILLs one and checks per-key order, no overlap, parallelism across keys and that
// the poison key halts with its reason. afterHalt, when set, runs while the surviving
// instance still works, with the halt record.
func orderCrashAndHalt(t *testing.T, f *fixture, s *sink, workerArgs []string, afterHalt func(*engine.HaltRecord)) {
	t.Helper()
	env := []string{"E2E_SECRET=" + e2eSecret}
	const perKey = 30
	keys := keyNames("h", 8)

	a, b := f.runTwo(env, workerArgs...)

	f.publish(append(steps(keys, 1, perKey/2), step{"poison-1", 1}, step{"poison-1", 2}))
	testkit.WaitFor(t, 20*time.Second, "both instances to deliver", func() bool {
		log, _, _ := s.snapshot()
		return lineCount(log) >= len(keys)*3 && len(f.ownersOf(keys)) == 2
	})
	b.signal(syscall.SIGKILL)
	b.wait(5 * time.Second)
	f.publish(steps(keys, perKey/2+1, perKey))

	testkit.WaitFor(t, 30*time.Second, "every event to be delivered", func() bool {
		log, _, _ := s.snapshot()
		return complete(log, keys, perKey)
	})
	log, violations, maxRunning := s.snapshot()
	checkOrder(t, log, keys, perKey)
	for _, v := range violations {
		t.Error(v)
	}
	if maxRunning < 2 {
		t.Errorf("at most %d request at a time: keys were not delivered in parallel", maxRunning)
	}
	if n := s.badSignatures.Load(); n != 0 {
		t.Errorf("%d requests with a bad signature", n)
	}

	// The poison key halts with the status and the body excerpt as its reason.
	broker := engine.NewRedisBroker(f.rdb)
	var halt *engine.HaltRecord
	testkit.WaitFor(t, 15*time.Second, "the poison key to halt", func() bool {
		var err error
		halt, err = broker.Halt(context.Background(), engine.HeadRef{Group: "Stepper", Category: "step", Key: "poison-1"})
		if err != nil {
			t.Fatal(err)
		}
		return halt != nil
	})
	want := "http 500 Internal Server Error: poison refused: " + strings.Repeat("z", 512-len("poison refused: "))
	if halt.Error != want {
		t.Errorf("halt reason = %q\nwant %q", halt.Error, want)
	}
	if halt.Attempts != 3 {
		t.Errorf("halted after %d attempts, want 3 (max_retries)", halt.Attempts)
	}
	t.Logf("%d requests for %d events; halt: %+v", s.requests.Load(), len(keys)*perKey+2, *halt)
	if afterHalt != nil {
		afterHalt(halt)
	}

	a.stop(syscall.SIGTERM, 10*time.Second)
}

// TestRunSIGTERMHandsOver: on SIGTERM an instance finishes its in-flight events and
// exits 0 within the shutdown timeout, and the other instance owns its partitions within
// 2 s of the exit.
func TestRunSIGTERMHandsOver(t *testing.T) {
	const secret = "x"
	s := newSink(t, secret, 150*time.Millisecond)
	srv := httptest.NewServer(s)
	defer srv.Close()
	f := newFixture(t, "http.domain.toml", map[string]string{"URL": srv.URL})
	env := []string{"E2E_SECRET=" + secret}
	keys := keyNames("t", 8)

	a, b := f.runTwo(env)
	f.publish(steps(keys, 1, 20)) // 3 s of work per key: in flight at the SIGTERM

	streams := f.streamsOf(keys)
	var ofA []string
	testkit.WaitFor(t, 15*time.Second, "both instances to own partitions", func() bool {
		ofA = ofA[:0]
		nb := 0
		for st, o := range f.leaseOwners(streams) {
			switch o {
			case "a":
				ofA = append(ofA, st)
			case "b":
				nb++
			}
		}
		return len(ofA) > 0 && nb > 0
	})
	start := time.Now()
	a.signal(syscall.SIGTERM)
	code := a.wait(10 * time.Second)
	exitAfter := time.Since(start)
	if code != 0 {
		t.Errorf("a exited %d after SIGTERM, want 0", code)
	}
	if exitAfter > 5*time.Second {
		t.Errorf("a took %v to exit, more than its 5s shutdown timeout", exitAfter)
	}
	exited := time.Now()
	testkit.WaitFor(t, 5*time.Second, "b to own a's partitions", func() bool {
		for _, o := range f.leaseOwners(ofA) {
			if o != "b" {
				return false
			}
		}
		return true
	})
	if d := time.Since(exited); d > 2*time.Second {
		t.Errorf("b took %v to take a's %d partitions, want at most 2s", d, len(ofA))
	}
	t.Logf("a exited %v after SIGTERM; b owned its %d partitions %v after the exit (%v after the SIGTERM)",
		exitAfter.Round(time.Millisecond), len(ofA), time.Since(exited).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))

	testkit.WaitFor(t, 30*time.Second, "every event to be delivered", func() bool {
		log, _, _ := s.snapshot()
		return complete(log, keys, 20)
	})
	log, violations, _ := s.snapshot()
	checkOrder(t, log, keys, 20)
	for _, v := range violations {
		t.Error(v)
	}
	// A graceful handover redelivers nothing: a finished its in-flight events and acked.
	if n := lineCount(log); n != len(keys)*20 {
		t.Errorf("%d deliveries for %d events after a graceful handover", n, len(keys)*20)
	}
	b.stop(syscall.SIGTERM, 10*time.Second)
}
