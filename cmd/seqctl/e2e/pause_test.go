package e2e

import (
	"encoding/json"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/testkit"
)

// pausedRow is a row of 'seqctl partitions list --state paused -o json'.
type pausedRow struct {
	Stream string `json:"stream"`
	State  string `json:"state"`
	Pause  *struct {
		Reason string     `json:"reason"`
		By     string     `json:"by"`
		Until  *time.Time `json:"until"`
	} `json:"pause"`
}

// paused lists the paused partitions, by stream.
func (f *fixture) paused() map[string]pausedRow {
	f.t.Helper()
	var rows []pausedRow
	out := f.mustSeqctl("partitions", "list", "--state", "paused", "-o", "json")
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		f.t.Fatalf("partitions list -o json: %v\n%s", err, out)
	}
	m := map[string]pausedRow{}
	for _, r := range rows {
		m[r.Stream] = r
	}
	return m
}

// handledOf is how many events of key the sink has handled.
func handledOf(s *sink, key string) int {
	log, _, _ := s.snapshot()
	return len(firstOccurrences(log)[key])
}

// TestPauseSurvivesRestarts: two 'seqctl run' processes deliver to the HTTP sink.
// 'seqctl partitions pause step:A' stops A while the other keys drain their backlog.
// Both processes are SIGKILLed, Redis is restarted from its append-only file and two
// new processes start and own A again: A still handles nothing. 'seqctl partitions
// resume' drains A in publish order. A '--for 3s' pause of another key ends by itself.
// The audit log holds every action with its reason, and no two events of a key ever
// overlapped.
func TestPauseSurvivesRestarts(t *testing.T) {
	s, sinkURL := startSink(t)
	f := newFixtureWith(t, "http.domain.toml", map[string]string{"URL": sinkURL}, redistest.Options{AOF: true})
	env := []string{"E2E_SECRET=" + e2eSecret}
	others := keyNames("k", 4)
	keys := append([]string{"A"}, others...)
	a, b := f.runTwo(env)

	f.publish(steps(keys, 1, 1))
	testkit.WaitFor(t, 15*time.Second, "the first event of every key", func() bool {
		log, _, _ := s.snapshot()
		return complete(log, keys, 1)
	})
	out := f.mustSeqctl("partitions", "pause", "step:A", "--reason", "repair A, OPS-42", "--yes")
	if !strings.Contains(out, "Paused step:A for Stepper until resumed") {
		t.Fatalf("pause: %s", out)
	}
	const backlog = 20
	f.publish(steps(keys, 2, backlog+1))
	testkit.WaitFor(t, 20*time.Second, "the other keys drain their backlog", func() bool {
		log, _, _ := s.snapshot()
		return complete(log, others, backlog+1)
	})
	if n := handledOf(s, "A"); n != 1 {
		t.Fatalf("the paused key handled %d events, want 1", n)
	}

	workers := restartEverything(f, env, a, b)
	f.publish(steps(others, backlog+2, backlog+3))
	testkit.WaitFor(t, 20*time.Second, "the other keys handled after the restarts, and A owned again", func() bool {
		log, _, _ := s.snapshot()
		owner := f.leaseOwners(f.streamsOf([]string{"A"}))[f.streamsOf([]string{"A"})[0]]
		return complete(log, others, backlog+3) && (owner == "a2" || owner == "b2")
	})
	time.Sleep(300 * time.Millisecond) // time enough for a wrongly running owner to start A
	if n := handledOf(s, "A"); n != 1 {
		t.Fatalf("after the restarts the paused key handled %d events, want 1", n)
	}
	if p := f.paused()["step:A"]; p.Pause == nil || p.Pause.Reason != "repair A, OPS-42" || p.Pause.Until != nil || p.State != "paused" {
		t.Fatalf("after the restarts step:A is listed as %+v", p)
	}

	f.mustSeqctl("partitions", "resume", "step:A", "--reason", "A repaired", "--yes")
	testkit.WaitFor(t, 20*time.Second, "A drains after the resume", func() bool { return handledOf(s, "A") == backlog+1 })
	log, _, _ := s.snapshot()
	checkOrder(t, log, []string{"A"}, backlog+1)

	pauseEndsByItself(f, s, "k0", backlog+3)
	checkPauseAudit(f, []string{
		"partitions pause step:A ok repair A, OPS-42",
		"partitions resume step:A ok A repaired",
		"partitions pause step:k0 ok brief hold",
	})
	_, violations, _ := s.snapshot()
	for _, v := range violations {
		t.Error(v)
	}
	for _, p := range workers {
		p.stop(syscall.SIGTERM, 10*time.Second)
	}
}

// restartEverything SIGKILLs the workers, restarts Redis from its append-only file and
// starts two new workers, a2 and b2, once Redis is back; it returns them ready.
func restartEverything(f *fixture, env []string, workers ...*proc) []*proc {
	f.t.Helper()
	for _, p := range workers {
		p.signal(syscall.SIGKILL)
		p.wait(5 * time.Second)
	}
	f.srv.Stop()
	f.srv.StartAgain()
	a2 := f.run("a2", append(slices.Clip(env), "SEQTEST_INSTANCE=a2"))
	b2 := f.run("b2", append(slices.Clip(env), "SEQTEST_INSTANCE=b2"))
	a2.waitReady(10 * time.Second)
	b2.waitReady(10 * time.Second)
	return []*proc{a2, b2}
}

// pauseEndsByItself pauses key for 3s, publishes its next event (seq handled+1) and
// checks that it waits at least until the pause ends, then is handled without a resume.
func pauseEndsByItself(f *fixture, s *sink, key string, handled int) {
	t := f.t
	t.Helper()
	start := time.Now() // before the pause begins
	out := f.mustSeqctl("partitions", "pause", "step:"+key, "--for", "3s", "--reason", "brief hold", "--yes")
	if !strings.Contains(out, "when it ends by itself") {
		t.Errorf("pause --for: %s", out)
	}
	f.publish([]step{{key, handled + 1}})
	time.Sleep(300 * time.Millisecond) // time enough for a wrongly running owner to start it
	// Each command above is a process of its own, slow under -race on a busy machine:
	// the check tells something only while the pause certainly lasts.
	if n, at := handledOf(s, key), time.Since(start); at < 2500*time.Millisecond {
		if n != handled {
			t.Fatalf("%s handled an event %v into a 3s pause (%d handled, want %d)", key, at.Round(time.Millisecond), n, handled)
		}
	} else {
		t.Logf("the check came %v after the pause began, too late to tell whether it held", at.Round(time.Millisecond))
	}
	if p := f.paused()["step:"+key]; (p.Pause == nil || p.Pause.Until == nil) && time.Since(start) < 2900*time.Millisecond {
		t.Errorf("step:%s is not listed paused with an end: %+v", key, p)
	}
	testkit.WaitFor(t, 15*time.Second, key+" goes on after its pause", func() bool { return handledOf(s, key) == handled+1 })
	took := time.Since(start)
	if took < 2500*time.Millisecond {
		t.Errorf("%s went on %v after a 3s pause", key, took)
	}
	t.Logf("%s went on %v after its 3s pause began", key, took.Round(100*time.Millisecond))
	if len(f.paused()) != 0 {
		t.Errorf("partitions still paused: %v", f.paused())
	}
}

// checkPauseAudit checks the audit log: "COMMAND STREAM OUTCOME REASON" per action.
func checkPauseAudit(f *fixture, want []string) {
	f.t.Helper()
	var entries []struct {
		Command, Stream, Outcome, Reason string
	}
	if err := json.Unmarshal([]byte(f.mustSeqctl("audit", "--since", "1h", "-o", "json")), &entries); err != nil {
		f.t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Command+" "+e.Stream+" "+e.Outcome+" "+e.Reason)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		f.t.Errorf("audit log (-want +got):\n%s", diff)
	}
}
