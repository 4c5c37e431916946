package partitions

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdtest"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/admin"
)

// pausedRows is what 'partitions list --state paused -o json' lists, by stream.
func pausedRows(w *cmdtest.OpsWorld, t *testing.T) map[string]admin.Partition {
	t.Helper()
	r := w.CLI(t, false, "partitions", "list", "--state", "paused", "-o", "json")
	if r.Code != 0 {
		t.Fatalf("partitions list --state paused: exit %d: %s", r.Code, r.Stderr)
	}
	var rows []admin.Partition
	if err := json.Unmarshal([]byte(r.Stdout), &rows); err != nil {
		t.Fatalf("%v\n%s", err, r.Stdout)
	}
	out := map[string]admin.Partition{}
	for _, p := range rows {
		out[p.Stream] = p
	}
	return out
}

// handled publishes seq to key and waits until Projector handled it.
func handled(w *cmdtest.OpsWorld, t *testing.T, key string, seq int) {
	t.Helper()
	w.Publish(t, cmdtest.OpsPayload{Client: key, Seq: seq})
	testkit.WaitFor(t, 10*time.Second, "order:"+key+" handled", func() bool { return slices.Contains(w.Log(t, key), strconv.Itoa(seq)) })
}

// Against a live engine: order:A paused by name and the B* keys by --key hold their
// events while order:C goes on; 'partitions list --state paused -o json' shows each
// with its reason; a --for 2s pause ends by itself; a resume drains each paused key in
// publish order; a halted partition and a resume of one not paused are refused with
// exit statuses 4 and 3; the audit log holds every action with its reason.
func TestPartitionsPauseEndToEnd(t *testing.T) {
	w := cmdtest.StartOpsWorld(t)
	for _, k := range []string{"A", "B1", "B2", "C", "D"} {
		handled(w, t, k, 0)
	}

	r := w.CLI(t, false, "partitions", "pause", "order:A", "--reason", "repair A", "--yes")
	cmdtest.CheckResult(t, r, 0, "", []string{"✓ Paused order:A for Projector until resumed"}, nil)
	r = w.CLI(t, true, "partitions", "pause", "--key", "B*", "--reason", "tenant B", "--yes")
	cmdtest.CheckResult(t, r, 0, "", []string{"paused   order:B1 for Projector, until resumed", "paused   order:B2 for Projector, until resumed", "✓ Paused 2 partitions."}, nil)

	rows := pausedRows(w, t)
	want := map[string]string{"order:A": "repair A", "order:B1": "tenant B", "order:B2": "tenant B"}
	got := map[string]string{}
	for s, p := range rows {
		if p.Pause == nil || p.Pause.By == "" || p.Pause.Since.IsZero() || !p.Pause.Until.IsZero() || p.State != admin.StatePaused {
			t.Errorf("%s: %+v (pause %+v)", s, p, p.Pause)
			continue
		}
		got[s] = p.Pause.Reason
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("paused partitions and their reasons (-want +got):\n%s", diff)
	}
	r = w.CLI(t, false, "partitions", "inspect", "order:A")
	cmdtest.CheckResult(t, r, 0, "", []string{"handler Projector  paused\n", "  paused      by " + rows["order:A"].Pause.By + " since ", ", until resumed\n", "  why         repair A\n"}, nil)

	for seq := 1; seq <= 3; seq++ {
		w.Publish(t, cmdtest.OpsPayload{Client: "A", Seq: seq})
		w.Publish(t, cmdtest.OpsPayload{Client: "B1", Seq: seq})
	}
	handled(w, t, "C", 1)
	time.Sleep(300 * time.Millisecond) // time enough for a wrongly running A or B1 to start
	if a, b := w.Log(t, "A"), w.Log(t, "B1"); len(a) != 1 || len(b) != 1 {
		t.Fatalf("a paused key handled events: A %v, B1 %v", a, b)
	}

	pauseEndsByItself(w, t, "D")

	r = w.CLI(t, false, "partitions", "resume", "order:A", "--reason", "A repaired", "--yes")
	cmdtest.CheckResult(t, r, 0, "", []string{"✓ Resumed order:A for Projector"}, nil)
	r = w.CLI(t, false, "partitions", "resume", "--key", "B*", "--yes")
	cmdtest.CheckResult(t, r, 0, "", []string{"✓ Resumed 2 partitions"}, nil)
	testkit.WaitFor(t, 10*time.Second, "A and B1 drained", func() bool { return len(w.Log(t, "A")) == 4 && len(w.Log(t, "B1")) == 4 })
	for _, k := range []string{"A", "B1"} {
		if diff := cmp.Diff([]string{"0", "1", "2", "3"}, w.Log(t, k)); diff != "" {
			t.Errorf("order:%s after the resume (-want +got):\n%s", k, diff)
		}
	}
	if rows := pausedRows(w, t); len(rows) != 0 {
		t.Errorf("still paused after the resumes: %v", rows)
	}

	pauseRefusals(w, t)

	var actions []string
	for _, e := range cmdtest.AuditOf(t, w.Srv.URL) {
		actions = append(actions, e.Command+" "+e.Stream+" "+e.Outcome+" "+e.Reason)
	}
	wantAudit := []string{
		"partitions pause order:A ok repair A", "partitions pause order:B1 ok tenant B", "partitions pause order:B2 ok tenant B",
		"partitions pause order:D ok brief", "partitions resume order:A ok A repaired", "partitions resume order:B1 ok ", "partitions resume order:B2 ok ",
		"partitions resume order:C not_paused ", "partitions pause order:H halted too late", "partitions pause order:C not_found r",
	}
	if diff := cmp.Diff(wantAudit, actions); diff != "" {
		t.Errorf("audit (-want +got):\n%s", diff)
	}
}

// pauseEndsByItself pauses key, which handled one event, for 2s and checks that its
// next event waits for the end of the pause and is then handled without a resume.
func pauseEndsByItself(w *cmdtest.OpsWorld, t *testing.T, key string) {
	t.Helper()
	r := w.CLI(t, false, "partitions", "pause", "order:"+key, "--for", "2s", "--reason", "brief", "--yes", "-o", "json")
	var res []pauseReport
	if err := json.Unmarshal([]byte(r.Stdout), &res); err != nil || r.Code != 0 || len(res) != 1 || res[0].Pause == nil ||
		res[0].Pause.Until.Sub(res[0].Pause.Since) != 2*time.Second {
		t.Fatalf("pause --for 2s -o json: exit %d, %v, %+v\n%s", r.Code, err, res, r.Stderr)
	}
	paused := time.Now()
	w.Publish(t, cmdtest.OpsPayload{Client: key, Seq: 1})
	if d := pausedRows(w, t)["order:"+key]; d.Pause == nil || d.Pause.Until.IsZero() {
		t.Errorf("order:%s is not listed paused with an end: %+v", key, d)
	}
	testkit.WaitFor(t, 10*time.Second, "order:"+key+" handled after its pause ended", func() bool { return len(w.Log(t, key)) == 2 })
	if took := time.Since(paused); took < 1500*time.Millisecond {
		t.Errorf("order:%s handled %v after a 2s pause", key, took)
	}
	if _, still := pausedRows(w, t)["order:"+key]; still {
		t.Error("order:" + key + " still listed paused after its pause ended")
	}
}

// pauseRefusals: a resume of a partition not paused exits 3, a pause of a halted one 4,
// a pause for an unknown handler 3.
func pauseRefusals(w *cmdtest.OpsWorld, t *testing.T) {
	t.Helper()
	r := w.CLI(t, false, "partitions", "resume", "order:C", "--yes")
	cmdtest.CheckResult(t, r, cmdutil.ExitNotFound, "", nil, []string{"engine: partition is not paused: order:C for Projector"})
	w.Publish(t, cmdtest.OpsPayload{Client: "H", Seq: 0, Poison: true})
	testkit.WaitFor(t, 20*time.Second, "order:H halted", func() bool {
		return strings.Contains(w.CLI(t, false, "partitions", "list", "--halted", "-o", "json").Stdout, `"order:H"`)
	})
	r = w.CLI(t, false, "partitions", "pause", "order:H", "--reason", "too late", "--yes")
	cmdtest.CheckResult(t, r, cmdutil.ExitConflict, "", nil, []string{"order:H is halted for Projector; resolve its head first"})
	r = w.CLI(t, false, "partitions", "pause", "order:C", "--handler", "Nope", "--reason", "r", "--yes")
	cmdtest.CheckResult(t, r, cmdutil.ExitNotFound, "", nil, []string{`handler "Nope" of order not found`})
}
