package head

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdtest"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// A poison event halts order:A; partitions list --halted -o json shows it with its
// halted_entry_id; head show prints the payload and the error; head skip with that id
// resumes the partition and later events are handled; audit lists the action.
func TestOperatorSkipEndToEnd(t *testing.T) {
	w := cmdtest.StartOpsWorld(t)
	poison := w.HaltA(t, true)

	r := w.CLI(t, true, "head", "show", "order:A", "--handler", "Projector")
	cmdtest.CheckResult(t, r, 0, "", []string{
		"id\t" + poison.EntryID, "status\thalted", "attempts\t2", "last_error\tpoison payload A/2 refused",
		`data	{"client_id":"A","seq":2,"poison":true}`,
	}, nil)
	r = w.CLI(t, true, "head", "show", "order:A", "--handler", "Projector", "-o", "json")
	var h admin.Head
	if err := json.Unmarshal([]byte(r.Stdout), &h); err != nil || h.ID != poison.EntryID || h.Envelope.ID != poison.EventID {
		t.Fatalf("head show -o json: %v %+v", err, h)
	}

	r = w.CLI(t, true, "head", "skip", "order:A", "--handler", "Projector", "--expect-id", poison.EntryID, "--yes", "--reason", "e2e")
	cmdtest.CheckResult(t, r, 0, "", []string{"Skipped " + poison.EntryID + " on order:A for Projector"}, nil)
	testkit.WaitFor(t, 10*time.Second, "order:A resumed", func() bool { return len(w.Log(t, "A")) == 4 })
	w.Publish(t, cmdtest.OpsPayload{Client: "A", Seq: 5})
	testkit.WaitFor(t, 10*time.Second, "a later event handled", func() bool { return len(w.Log(t, "A")) == 5 })
	if diff := cmp.Diff([]string{"0", "1", "3", "4", "5"}, w.Log(t, "A")); diff != "" {
		t.Errorf("order:A after the skip (-want +got):\n%s", diff)
	}
	r = w.CLI(t, true, "partitions", "list", "--halted", "-o", "json")
	if strings.TrimSpace(r.Stdout) != "[]" {
		t.Errorf("still halted after the skip: %s", r.Stdout)
	}

	entries := cmdtest.AuditOf(t, w.Srv.URL)
	if len(entries) != 1 {
		t.Fatalf("audit = %+v, want the skip", entries)
	}
	e := entries[0]
	if e.Command != "head skip" || e.Stream != "order:A" || e.Handler != "Projector" || e.EntryID != poison.EntryID ||
		e.Outcome != admin.OutcomeOK || e.Reason != "e2e" || e.User == "" || e.Host == "" || e.Time.IsZero() {
		t.Errorf("audit entry = %+v", e)
	}
	r = w.CLI(t, false, "audit")
	if !strings.Contains(r.Stdout, "head skip\torder:A\tProjector\t"+poison.EntryID+"\tok") {
		t.Errorf("audit rows lack the skip:\n%s", r.Stdout)
	}
}

// head dlq moves the head with its error to order:A:dlq, the partition resumes, dlq list
// shows it (and a replay puts it back at the tail). Without --config: categories and
// handlers come from Redis.
func TestOperatorDLQEndToEnd(t *testing.T) {
	w := cmdtest.StartOpsWorld(t)
	poison := w.HaltA(t, false)

	r := w.CLI(t, false, "head", "dlq", "order:A", "--handler", "Projector", "--expect-id", poison.EntryID, "--yes", "--reason", "bad payload")
	cmdtest.CheckResult(t, r, 0, "", []string{"to order:A:dlq with its error"}, nil)
	testkit.WaitFor(t, 10*time.Second, "order:A resumed", func() bool { return len(w.Log(t, "A")) == 4 })

	msgs := w.Rdb.XRange(context.Background(), keyspace.SingleNode.DLQStream("order", "A"), "-", "+").Val()
	if len(msgs) != 1 || msgs[0].Values["halt_error"] != "poison payload A/2 refused" || msgs[0].Values["original_id"] != poison.EntryID ||
		msgs[0].Values["reason"] != "bad payload" || msgs[0].Values["data"] != `{"client_id":"A","seq":2,"poison":true}` {
		t.Fatalf("order:A:dlq = %+v", msgs)
	}

	r = w.CLI(t, false, "dlq", "list", "order:A", "-o", "json")
	var dlq []admin.DLQEntry
	if err := json.Unmarshal([]byte(r.Stdout), &dlq); err != nil || len(dlq) != 1 {
		t.Fatalf("dlq list -o json: %v\n%s", err, r.Stdout)
	}
	if d := dlq[0]; d.OriginalID != poison.EntryID || d.Error != "poison payload A/2 refused" || d.Attempts != 2 || d.Handler != "Projector" {
		t.Errorf("dlq entry = %+v", d)
	}
	r = w.CLI(t, false, "dlq", "list", "order:A")
	if !strings.Contains(r.Stdout, poison.EntryID+"\tProjector\tOrderPlaced\t"+poison.EventID) {
		t.Errorf("dlq list rows:\n%s", r.Stdout)
	}

	// Replay: at the tail, removed from the DLQ; the handler still refuses it, so the
	// partition halts again, on the new entry.
	r = w.CLI(t, false, "dlq", "replay", "order:A", "--id", dlq[0].ID, "--yes", "-o", "json")
	var rr admin.ReplayResult
	if err := json.Unmarshal([]byte(r.Stdout), &rr); err != nil || !rr.Removed || rr.EventID != poison.EventID {
		t.Fatalf("dlq replay: %v %+v (stderr %s)", err, rr, r.Stderr)
	}
	if n := w.Rdb.XLen(context.Background(), keyspace.SingleNode.DLQStream("order", "A")).Val(); n != 0 {
		t.Errorf("the DLQ still has %d entries after the replay", n)
	}
	testkit.WaitFor(t, 10*time.Second, "halted on the replayed entry", func() bool {
		r := w.CLI(t, false, "partitions", "list", "--halted", "-o", "json")
		return strings.Contains(r.Stdout, `"halted_entry_id": "`+rr.EntryID+`"`)
	})
	if diff := cmp.Diff([]string{"head dlq ok", "dlq replay ok"}, cmdtest.Outcomes(cmdtest.AuditOf(t, w.Srv.URL))); diff != "" {
		t.Errorf("audit (-want +got):\n%s", diff)
	}
}

// A stale --expect-id exits 4 and changes nothing; a head that is not halted is refused
// without --force; no --yes without a terminal exits 2 and changes nothing. Each refusal
// is in the audit log.
func TestOperatorRefusalsEndToEnd(t *testing.T) {
	w := cmdtest.StartOpsWorld(t)
	poison := w.HaltA(t, true)
	haltOf := func() map[string]string {
		return w.Rdb.HGetAll(context.Background(), keyspace.SingleNode.HaltKey("order:A", "Projector")).Val()
	}
	pending := func(stream string) int64 {
		p, err := w.Rdb.XPending(context.Background(), stream, "Projector").Result()
		if err != nil {
			return -1 // no group yet
		}
		return p.Count
	}
	before := haltOf()
	pendingA := pending("order:A")

	r := w.CLI(t, true, "head", "skip", "order:A", "--handler", "Projector", "--expect-id", "1-1", "--yes")
	cmdtest.CheckResult(t, r, cmdutil.ExitConflict, "", nil, []string{"head moved: expected 1-1, the head is now " + poison.EntryID})

	r = w.CLI(t, true, "head", "dlq", "order:A", "--handler", "Projector")
	cmdtest.CheckResult(t, r, cmdutil.ExitUsage, "", nil, []string{"refusing to move to the DLQ " + poison.EntryID + " without confirmation", "pass --yes"})

	if diff := cmp.Diff(before, haltOf()); diff != "" {
		t.Errorf("the halt record changed (-before +after):\n%s", diff)
	}
	if n := pending("order:A"); n != pendingA {
		t.Errorf("pending entries changed: %d -> %d", pendingA, n)
	}
	if n := w.Rdb.Exists(context.Background(), keyspace.SingleNode.DLQStream("order", "A")).Val(); n != 0 {
		t.Error("something was moved to the DLQ")
	}

	// A head in flight (the handler is still working on it) is not halted.
	blocked := w.Publish(t, cmdtest.OpsPayload{Client: "C", Seq: 0, Block: true})
	testkit.WaitFor(t, 10*time.Second, "order:C in flight", func() bool {
		return pending("order:C") == 1
	})
	r = w.CLI(t, true, "head", "skip", "order:C", "--handler", "Projector", "--yes")
	cmdtest.CheckResult(t, r, cmdutil.ExitFailure, "", nil, []string{"the head " + blocked.EntryID + " of order:C for Projector is pending, not halted; pass --force"})
	if n := pending("order:C"); n != 1 {
		t.Errorf("the refused skip acknowledged the in-flight entry")
	}
	r = w.CLI(t, true, "head", "retry", "order:C", "--handler", "Projector", "--expect-id", blocked.EntryID, "--yes")
	cmdtest.CheckResult(t, r, cmdutil.ExitFailure, "", nil, []string{"only a halted head can be retried"})

	want := []string{"head skip head_moved", "head dlq refused", "head skip not_halted", "head retry not_halted"}
	if diff := cmp.Diff(want, cmdtest.Outcomes(cmdtest.AuditOf(t, w.Srv.URL))); diff != "" {
		t.Errorf("audit (-want +got):\n%s", diff)
	}

	// With --force the running head is skipped (the owner's handler is still running).
	r = w.CLI(t, true, "head", "skip", "order:C", "--handler", "Projector", "--expect-id", blocked.EntryID, "--yes", "--force")
	cmdtest.CheckResult(t, r, 0, "", []string{"Skipped " + blocked.EntryID}, nil)
}

// The shortest resolve, 'head skip STREAM --yes' with neither --handler nor --expect-id,
// against a live engine whose category has one handler, resumes the partition; a
// malformed --expect-id is a usage error (exit 2) that changes nothing.
func TestOperatorSkipInfersHandlerEndToEnd(t *testing.T) {
	w := cmdtest.StartOpsWorld(t)
	poison := w.HaltA(t, false)

	r := w.CLI(t, false, "head", "skip", "order:A", "--expect-id", "garbage", "--yes")
	cmdtest.CheckResult(t, r, cmdutil.ExitUsage, "", nil, []string{`invalid value "garbage" for --expect-id`})
	if got := w.Log(t, "A"); len(got) != 2 {
		t.Fatalf("a malformed --expect-id changed something: %v", got)
	}

	r = w.CLI(t, false, "head", "skip", "order:A", "--yes")
	cmdtest.CheckResult(t, r, 0, "", []string{"Skipped " + poison.EntryID + " on order:A for Projector"}, []string{"Current head of order:A for Projector"})
	testkit.WaitFor(t, 10*time.Second, "order:A resumed", func() bool { return len(w.Log(t, "A")) == 4 })
	if diff := cmp.Diff([]string{"0", "1", "3", "4"}, w.Log(t, "A")); diff != "" {
		t.Errorf("order:A after the skip (-want +got):\n%s", diff)
	}
}
