package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/config"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// curableSink is an HTTP handler endpoint that refuses seq 2 of the keys in poison until
// the test cures them, and records what it handled per key.
type curableSink struct {
	mu     sync.Mutex
	poison map[string]bool  // key -> seq 2 is refused; guarded by mu
	log    map[string][]int // key -> seqs handled, in order; guarded by mu
}

func (s *curableSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	env, ok := decodeStep(w, body)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if env.Data.Seq == 2 && s.poison[env.Key] {
		http.Error(w, "poison refused", http.StatusInternalServerError)
		return
	}
	s.log[env.Key] = append(s.log[env.Key], env.Data.Seq)
	w.WriteHeader(http.StatusNoContent)
}

func (s *curableSink) logOf(key string) []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.log[key])
}

func (s *curableSink) cure(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.poison, key)
}

// clusterFixture is a fixture whose Redis is a 3-master Redis Cluster: every seqctl
// command gets --redis-url with the cluster URL and --cluster.
func clusterFixture(t *testing.T, subst map[string]string) (*fixture, *redistest.Cluster) {
	t.Helper()
	f := newClusterFixture(t, "http.domain.toml", subst)
	return f, f.cl
}

// seqctl runs one operator command against the fixture's Redis and returns its stdout,
// stderr and exit code.
func (f *fixture) seqctl(args ...string) (string, string, int) {
	f.t.Helper()
	argv := []string{"--redis-url", f.url}
	if f.config != "" {
		argv = append(argv, "--config", f.config)
	}
	argv = append(append(argv, f.global...), args...)
	cmd := exec.Command(seqctlBin, argv...)
	cmd.Env = append(os.Environ(), config.EnvRedisURL+"=", "NO_COLOR=1")
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		f.t.Fatalf("seqctl %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
}

// mustSeqctl is seqctl that fails the test unless the command exits 0.
func (f *fixture) mustSeqctl(args ...string) string {
	f.t.Helper()
	out, errOut, code := f.seqctl(args...)
	if code != 0 {
		f.t.Fatalf("seqctl %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// listedPartition is a row of 'seqctl partitions list -o json'.
type listedPartition struct {
	Stream        string  `json:"stream"`
	Handler       string  `json:"handler"`
	State         string  `json:"state"`
	Owner         *string `json:"owner"`
	Generation    *int64  `json:"generation"`
	Backlog       *int64  `json:"backlog"`
	HaltedEntryID *string `json:"halted_entry_id"`
}

// The operator commands against a Redis Cluster: 'seqctl run --cluster' delivers keys
// spread over the three masters to an HTTP handler that refuses one event of two keys,
// both halt; 'partitions list' shows every partition with its owner, generation, backlog
// and state, named as the cluster names them; 'head skip' resumes one halted partition
// and 'head dlq' the other (named in the plain form), 'dlq list' shows the entry and
// 'dlq replay' re-publishes it, handled once the handler accepts it; 'groups remove'
// says why it cannot run on a cluster.
func TestClusterOperatorCommands(t *testing.T) {
	s := &curableSink{poison: map[string]bool{}, log: map[string][]int{}}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	f, cl := clusterFixture(t, map[string]string{"URL": srv.URL})
	keys := cl.OnEachMaster(t, 3, func(j int) (string, string) {
		k := fmt.Sprintf("k%d", j)
		return k, keyspace.Cluster.PartitionStream("step", k)
	})
	skipped, moved, healthy := keys[0], keys[1], keys[2]
	s.poison[skipped], s.poison[moved] = true, true

	run := f.run("a", []string{"E2E_SECRET=" + e2eSecret})
	run.waitReady(20 * time.Second)
	f.publish(steps(keys, 1, 3))

	stream := func(k string) string { return "step:{" + k + "}" }
	var rows []listedPartition
	testkit.WaitFor(t, 30*time.Second, "two halted partitions and a drained one", func() bool {
		out := f.mustSeqctl("partitions", "list", "-o", "json")
		rows = nil
		if err := json.Unmarshal([]byte(out), &rows); err != nil {
			t.Fatalf("partitions list -o json: %v\n%s", err, out)
		}
		halted := 0
		for _, r := range rows {
			if r.State == "halted" {
				halted++
			}
		}
		return len(rows) == 3 && halted == 2 && cmp.Equal(s.logOf(healthy), []int{1, 2, 3})
	})
	type summary struct {
		Stream, Handler, State string
		Owned, Halted          bool
		Generation, Backlog    int64
	}
	var got []summary
	for _, r := range rows {
		sm := summary{Stream: r.Stream, Handler: r.Handler, State: r.State, Owned: r.Owner != nil && strings.HasPrefix(*r.Owner, "a."),
			Halted: r.HaltedEntryID != nil}
		if r.Generation != nil && *r.Generation > 0 {
			sm.Generation = 1 // present; its value depends on the takeover order
		}
		if r.Backlog != nil {
			sm.Backlog = *r.Backlog
		}
		got = append(got, sm)
	}
	want := []summary{
		{stream(skipped), "Stepper", "halted", true, true, 1, 2},
		{stream(moved), "Stepper", "halted", true, true, 1, 2},
		{stream(healthy), "Stepper", "idle", true, false, 1, 0},
	}
	sortSummaries := func(xs []summary) {
		slices.SortFunc(xs, func(x, y summary) int { return strings.Compare(x.Stream, y.Stream) })
	}
	sortSummaries(want)
	sortSummaries(got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("partitions list -o json (-want +got):\n%s", diff)
	}
	table := f.mustSeqctl("partitions", "list") // a pipe: tab-separated rows, category and key apart
	for _, k := range keys {
		if !strings.Contains(table, "step\t"+k+"\tStepper\ta.") {
			t.Errorf("partitions list: no owned row for %s:\n%s", stream(k), table)
		}
	}
	if strings.Count(table, "halted") != 2 {
		t.Errorf("partitions list: want two halted rows:\n%s", table)
	}

	// Resolve both heads: skip one (cluster form), move the other to its DLQ (plain form).
	out := f.mustSeqctl("head", "skip", stream(skipped), "--handler", "Stepper", "--yes", "--reason", "e2e")
	if !strings.Contains(out, stream(skipped)) {
		t.Errorf("head skip printed no %s:\n%s", stream(skipped), out)
	}
	f.mustSeqctl("head", "dlq", "step:"+moved, "--handler", "Stepper", "--yes", "--reason", "e2e")
	testkit.WaitFor(t, 20*time.Second, "both partitions resumed past their heads", func() bool {
		return cmp.Equal(s.logOf(skipped), []int{1, 3}) && cmp.Equal(s.logOf(moved), []int{1, 3})
	})

	out = f.mustSeqctl("dlq", "list")
	if !strings.Contains(out, stream(moved)) || strings.Contains(out, stream(skipped)) {
		t.Errorf("dlq list: want %s only:\n%s", stream(moved), out)
	}
	out = f.mustSeqctl("dlq", "list", "step:"+moved, "-o", "json")
	var entries []struct {
		ID        string `json:"id"`
		DLQStream string `json:"dlq_stream"`
		Lane      string `json:"lane"`
	}
	if err := json.Unmarshal([]byte(out), &entries); err != nil {
		t.Fatalf("dlq list -o json: %v\n%s", err, out)
	}
	if len(entries) != 1 || entries[0].DLQStream != stream(moved)+":dlq" || entries[0].Lane != stream(moved) {
		t.Fatalf("dlq list %s = %+v, want one entry in %s:dlq from %s", stream(moved), entries, stream(moved), stream(moved))
	}
	s.cure(moved)
	f.mustSeqctl("dlq", "replay", stream(moved), "--id", entries[0].ID, "--yes")
	testkit.WaitFor(t, 20*time.Second, "the replayed event handled", func() bool { return cmp.Equal(s.logOf(moved), []int{1, 3, 2}) })
	if out := f.mustSeqctl("dlq", "list", stream(moved), "-o", "json"); strings.TrimSpace(out) != "[]" {
		t.Errorf("dlq list after the replay = %s, want []", out)
	}

	// The audit log has the three actions, whichever form names the partition.
	out = f.mustSeqctl("audit", "--stream", "step:"+moved, "-o", "json")
	var recs []struct {
		Command string `json:"command"`
		Outcome string `json:"outcome"`
	}
	if err := json.Unmarshal([]byte(out), &recs); err != nil {
		t.Fatalf("audit -o json: %v\n%s", err, out)
	}
	if len(recs) != 2 {
		t.Errorf("audit of step:%s = %+v, want the move to the DLQ and the replay", moved, recs)
	}

	// Retiring a group is one script over every partition of the category: not on a
	// cluster. The group must be stopped and undeclared to get that far.
	run.signal(syscall.SIGTERM)
	if code := run.wait(15 * time.Second); code != 0 {
		t.Fatalf("seqctl run exited %d", code)
	}
	f.config = "" // no config: nothing declares Stepper
	_, errOut, code := f.seqctl("groups", "remove", "Stepper", "--category", "step", "--yes")
	if code == 0 || !strings.Contains(errOut, "not supported") || strings.Contains(errOut, "panic") {
		t.Errorf("groups remove on a cluster: exit %d, stderr:\n%s\nwant a refusal saying it is not supported", code, errOut)
	}
}
