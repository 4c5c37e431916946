package admin_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/engine"
)

func TestActions(t *testing.T) {
	w := haltedWorld(t)
	ctx := context.Background()
	adm := admin.New(w.rdb, admin.Options{})
	actor := admin.Actor{User: "ops", Host: "laptop", Command: "head skip"}
	act := func(kind admin.ActionKind, id string, force bool) error {
		_, err := adm.Act(ctx, admin.Action{Kind: kind, Stream: "order:A", Handler: "Projector", ExpectID: id, Force: force, Reason: "test", Actor: actor})
		return err
	}

	// A stale id changes nothing.
	var moved *engine.HeadMovedError
	if err := act(admin.ActionSkip, "1-1", false); !errors.As(err, &moved) || moved.Head != w.poison.EntryID {
		t.Fatalf("stale skip: err = %v, want HeadMovedError naming %s", err, w.poison.EntryID)
	}
	// The head's millisecond alone names no entry: refused as such, not as a head that
	// moved.
	ms, _, _ := strings.Cut(w.poison.EntryID, "-")
	if err := act(admin.ActionSkip, ms, false); err == nil || errors.As(err, &moved) || !strings.Contains(err.Error(), `invalid stream entry id "`+ms+`"`) {
		t.Errorf("skip expecting %q: err = %v, want an invalid stream entry id error", ms, err)
	}
	// Retry: the owner tries once more, fails, and halts again (3 attempts now).
	if err := act(admin.ActionRetry, w.poison.EntryID, false); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "halted again after the retry", func() bool {
		h, err := adm.Head(ctx, "order:A", "Projector")
		return err == nil && h.Status == admin.HeadHalted && h.Attempts == 3
	})
	// Move to the DLQ: the entry is copied with its error, the partition resumes.
	res, err := adm.Act(ctx, admin.Action{Kind: admin.ActionDLQ, Stream: "order:A", Handler: "Projector", ExpectID: w.poison.EntryID, Reason: "bad payload", Actor: actor})
	if err != nil {
		t.Fatal(err)
	}
	if res.DLQStream != "order:A:dlq" || res.Outcome != admin.OutcomeOK {
		t.Errorf("dlq result = %+v", res)
	}
	testkit.WaitFor(t, 10*time.Second, "order:A resumed", func() bool { return len(logOf(t, w.rdb, "A")) == 4 })
	dlq, err := adm.DLQ(ctx, "order:A")
	if err != nil {
		t.Fatal(err)
	}
	if len(dlq) != 1 || dlq[0].OriginalID != w.poison.EntryID || dlq[0].Handler != "Projector" || dlq[0].Attempts != 3 ||
		!strings.Contains(dlq[0].Error, "poison payload") || dlq[0].MovedBy != "ops@laptop" || dlq[0].Reason != "bad payload" ||
		dlq[0].MovedAt == nil || dlq[0].Lane != "order:A" || dlq[0].Envelope.ID != w.poison.EventID || dlq[0].Envelope.Fields != nil {
		t.Fatalf("DLQ = %+v", dlq)
	}
	// A head that is not halted is refused without force.
	if err := act(admin.ActionSkip, w.poison.EntryID, false); !errors.Is(err, engine.ErrHeadMoved) {
		t.Errorf("skip after the move: err = %v, want head moved (no head)", err)
	}

	// Replay: back at the tail, same event id, removed from the DLQ; it halts again.
	plan, err := adm.PlanReplay(ctx, "order:A", dlq[0].ID)
	if err != nil || plan.Stream != "order:A" {
		t.Fatalf("plan = %+v, %v", plan, err)
	}
	replayer := admin.Actor{User: "ops", Host: "laptop", Command: "dlq replay"}
	rr, err := adm.Replay(ctx, "order:A", dlq[0].ID, replayer)
	if err != nil {
		t.Fatal(err)
	}
	if !rr.Removed || rr.EventID != w.poison.EventID || rr.Stream != "order:A" || rr.EntryID <= w.poison.EntryID {
		t.Errorf("replay = %+v", rr)
	}
	if left, _ := adm.DLQ(ctx, "order:A"); len(left) != 0 {
		t.Errorf("DLQ after the replay = %+v, want empty", left)
	}
	testkit.WaitFor(t, 10*time.Second, "halted on the replayed entry", func() bool {
		h, err := adm.Head(ctx, "order:A", "Projector")
		return err == nil && h.Status == admin.HeadHalted && h.ID == rr.EntryID
	})
	if _, err := adm.Replay(ctx, "order:A", dlq[0].ID, replayer); !errors.Is(err, admin.ErrNotFound) {
		t.Errorf("second replay: err = %v, want not found", err)
	}

	// Skip the replayed head now.
	if err := act(admin.ActionSkip, rr.EntryID, false); err != nil {
		t.Fatal(err)
	}

	// A pending head that is not halted (Mailer reads by hand) needs force.
	w.rdb.XGroupCreate(ctx, "order:B", "Mailer", "0")
	msgs := w.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "Mailer", Consumer: "x", Streams: []string{"order:B", ">"}, Count: 1}).Val()
	mid := msgs[0].Messages[0].ID
	mail := func(force bool) error {
		_, err := adm.Act(ctx, admin.Action{Kind: admin.ActionSkip, Stream: "order:B", Handler: "Mailer", ExpectID: mid, Force: force, Actor: actor})
		return err
	}
	if err := mail(false); !errors.Is(err, engine.ErrNotHalted) {
		t.Errorf("skip of a running head: err = %v, want ErrNotHalted", err)
	}
	if err := mail(true); err != nil {
		t.Errorf("forced skip: %v", err)
	}

	// Every attempt is in the audit log with its outcome.
	entries, err := adm.Audit(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var outcomes []string
	for _, e := range entries {
		outcomes = append(outcomes, e.Command+" "+e.Outcome)
		if e.User != "ops" || e.Host != "laptop" || e.Stream == "" || e.EntryID == "" || e.Time.IsZero() {
			t.Errorf("audit entry lacks fields: %+v", e)
		}
	}
	wantOutcomes := []string{
		"head skip head_moved", "head skip failed", "head skip ok", "head skip ok", "head skip head_moved", "dlq replay ok", "dlq replay not_found",
		"head skip ok", "head skip not_halted", "head skip ok",
	}
	if diff := cmp.Diff(wantOutcomes, outcomes); diff != "" {
		t.Errorf("audit (-want +got):\n%s", diff)
	}
	if recent, _ := adm.Audit(ctx, time.Nanosecond); len(recent) >= len(entries) {
		t.Errorf("--since 1ns returned %d of %d entries", len(recent), len(entries))
	}
}

// With MinReplicas 1 every action (retry, move to DLQ, DLQ replay, skip) waits for the
// replica once; with the replica stopped, a skip is done on the primary, returns the
// shortfall (the action may be lost on failover) and is audited as not_replicated.
func TestActionsWaitForReplicas(t *testing.T) {
	w := haltedWorld(t)
	replica := redistest.StartReplica(t, w.srv)
	ctx := context.Background()
	adm := admin.New(w.rdb, admin.Options{MinReplicas: 1, ReplicaTimeout: time.Second})
	actor := admin.Actor{User: "ops", Host: "laptop", Command: "head"}
	waits := func() int64 { return redistest.CommandCalls(t, w.rdb, "wait") }
	act := func(kind admin.ActionKind, id string) error {
		_, err := adm.Act(ctx, admin.Action{Kind: kind, Stream: "order:A", Handler: "Projector", ExpectID: id, Actor: actor})
		return err
	}
	haltedOn := func(id string, attempts int64) {
		t.Helper()
		testkit.WaitFor(t, 10*time.Second, "halted on "+id, func() bool {
			h, err := adm.Head(ctx, "order:A", "Projector")
			return err == nil && h.Status == admin.HeadHalted && h.ID == id && h.Attempts == attempts
		})
	}
	counted := func(name string, fn func() error) {
		t.Helper()
		before := waits()
		if err := fn(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		n := waits() - before
		t.Logf("%s: %d WAIT call(s)", name, n)
		if n != 1 {
			t.Errorf("%s: %d WAIT calls, want 1", name, n)
		}
	}

	counted("retry", func() error { return act(admin.ActionRetry, w.poison.EntryID) })
	haltedOn(w.poison.EntryID, 3)
	counted("move to DLQ", func() error { return act(admin.ActionDLQ, w.poison.EntryID) })
	dlq, err := adm.DLQ(ctx, "order:A")
	if err != nil || len(dlq) != 1 {
		t.Fatalf("DLQ = %+v, %v", dlq, err)
	}
	var rr *admin.ReplayResult
	counted("DLQ replay", func() (err error) { rr, err = adm.Replay(ctx, "order:A", dlq[0].ID, actor); return err })
	haltedOn(rr.EntryID, 2)

	replica.Stop()
	err = act(admin.ActionSkip, rr.EntryID)
	if !errors.Is(err, engine.ErrReplicaShortfall) || !strings.Contains(err.Error(), "failover may lose it") {
		t.Fatalf("skip with the replica down: err = %v, want the shortfall saying a failover may lose it", err)
	}
	t.Logf("skip with the replica down: %v", err)
	if h, err := adm.Head(ctx, "order:A", "Projector"); err == nil && h.ID == rr.EntryID {
		t.Errorf("the skip was not done on the primary: the head is still %s", h.ID)
	}
	entries, err := adm.Audit(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	last := entries[len(entries)-1]
	if last.Outcome != admin.OutcomeNotReplicated || !strings.Contains(last.Detail, "0 of the 1 required replicas") {
		t.Errorf("audit of the skip = %+v, want outcome %s with the numbers", last, admin.OutcomeNotReplicated)
	}
}
