package admin_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/engine"
)

// Pause and resume through the admin: the partition lists as paused with its record and
// holds its backlog while another key goes on; a halted partition, an unknown handler, a
// partition not paused and a pause without a reason are refused; every attempt is in the
// audit log with its outcome and reason.
func TestPauseAndResume(t *testing.T) {
	w := haltedWorld(t) // order:A halted on its third event, order:B drained
	ctx := context.Background()
	adm := admin.New(w.rdb, admin.Options{})
	actor := admin.Actor{User: "ops", Host: "laptop", Command: "partitions pause"}
	req := admin.PauseRequest{Stream: "order:B", Handler: "Projector", Reason: "tenant migration", Actor: actor}

	res, err := adm.Pause(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != admin.OutcomeOK || res.Pause == nil || res.Pause.By != "ops@laptop" || res.Pause.Reason != "tenant migration" || !res.Pause.Until.IsZero() {
		t.Fatalf("pause result = %+v (record %+v)", res, res.Pause)
	}
	publish(t, w.broker, w.dom, "B", 3, false)
	publish(t, w.broker, w.dom, "C", 0, false)
	testkit.WaitFor(t, 10*time.Second, "order:C handled", func() bool { return len(logOf(t, w.rdb, "C")) == 1 })
	ps, err := adm.ListPartitions(ctx, admin.Filter{States: []admin.State{admin.StatePaused}})
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1 || ps[0].Stream != "order:B" || ps[0].Pause == nil || ps[0].Pause.Reason != "tenant migration" || ps[0].Backlog != 1 {
		t.Fatalf("paused partitions = %+v", ps)
	}
	if n := len(logOf(t, w.rdb, "B")); n != 3 {
		t.Fatalf("the paused key ran an event: %d handled, want 3", n)
	}

	refusals := []struct {
		name    string
		call    func() error
		want    error
		outcome string
	}{
		{"halted", func() error {
			_, err := adm.Pause(ctx, admin.PauseRequest{Stream: "order:A", Handler: "Projector", Reason: "r", Actor: actor})
			return err
		}, engine.ErrHalted, admin.OutcomeHalted},
		{"unknown handler", func() error {
			_, err := adm.Pause(ctx, admin.PauseRequest{Stream: "order:C", Handler: "Nope", Reason: "r", Actor: actor})
			return err
		}, admin.ErrNotFound, admin.OutcomeNotFound},
		{"not paused", func() error {
			_, err := adm.Resume(ctx, admin.PauseRequest{Stream: "order:C", Handler: "Projector", Actor: actor})
			return err
		}, engine.ErrNotPaused, admin.OutcomeNotPaused},
	}
	for _, r := range refusals {
		if err := r.call(); !errors.Is(err, r.want) || admin.OutcomeOf(err) != r.outcome {
			t.Errorf("%s: err = %v (outcome %s), want %v (%s)", r.name, err, admin.OutcomeOf(err), r.want, r.outcome)
		}
	}
	if _, err := adm.Pause(ctx, admin.PauseRequest{Stream: "order:C", Handler: "Projector", Actor: actor}); err == nil {
		t.Error("a pause without a reason was accepted")
	}
	for _, d := range []time.Duration{-time.Second, time.Microsecond} {
		if _, err := adm.Pause(ctx, admin.PauseRequest{Stream: "order:C", Handler: "Projector", Reason: "r", For: d, Actor: actor}); err == nil {
			t.Errorf("a pause for %s was accepted (under 1ms it would never end)", d)
		}
	}

	if _, err := adm.Resume(ctx, admin.PauseRequest{Stream: "order:B", Handler: "Projector", Reason: "migrated", Actor: actor}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "order:B drained after the resume", func() bool { return len(logOf(t, w.rdb, "B")) == 4 })

	audit, err := adm.Audit(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range audit {
		got = append(got, e.Stream+" "+e.Outcome+" "+e.Reason)
	}
	want := []string{
		"order:B ok tenant migration", "order:A halted r", "order:C not_found r", "order:C not_paused ",
		"order:C failed ", "order:C failed r", "order:C failed r", "order:B ok migrated",
	}
	if len(got) < len(want) || !equalTail(got, want) {
		t.Fatalf("audit log = %q, want it to end with %q", got, want)
	}
}

func equalTail(got, want []string) bool {
	got = got[len(got)-len(want):]
	for i := range want {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}
