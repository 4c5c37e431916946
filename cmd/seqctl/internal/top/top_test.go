package top

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdtest"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/engine"
	"github.com/seqctl/seqctl/pkg/tui"
)

func TestTopParse(t *testing.T) {
	tests := []struct {
		args    []string
		refresh time.Duration
		ro      bool
		wantErr bool
	}{
		{args: nil, refresh: time.Second},
		{args: []string{"--refresh", "250ms", "--readonly"}, refresh: 250 * time.Millisecond, ro: true},
		{args: []string{"--refresh", "0s"}, wantErr: true},
		{args: []string{"extra"}, wantErr: true},
	}
	for _, tt := range tests {
		ios, _, _, _ := cmdutil.NewTestIOStreams()
		f := &cmdutil.Factory{IOStreams: ios}
		var got *Options
		cmd := NewCmd(f, func(o *Options) error { got = o; return nil })
		cmd.SetArgs(tt.args)
		cmd.SilenceErrors, cmd.SilenceUsage = true, true
		err := cmd.Execute()
		if (err != nil) != tt.wantErr {
			t.Fatalf("%v: err = %v, wantErr %v", tt.args, err, tt.wantErr)
		}
		if err == nil && (got.Refresh != tt.refresh || got.ReadOnly != tt.ro) {
			t.Errorf("%v: got refresh %v readonly %v", tt.args, got.Refresh, got.ReadOnly)
		}
	}
}

// The adapter maps admin rows onto dashboard rows, counts owned partitions per live
// instance, carries a pause record, passes "head moved" through, and reports a caught-up
// partition as headless.
func TestAdminSourceAdapter(t *testing.T) {
	fa := &cmdtest.FakeAdmin{
		Partitions: []admin.Partition{
			{Category: "order", Key: "A", Stream: "order:A", Handler: "P", Owner: "i1.2", Generation: 7, LeaseRemainingMS: 900,
				Lag: 3, Pending: 1, HeadAgeMS: 1500, State: admin.StateHalted, HaltedEntryID: "5-0", Handled: 40},
			{Category: "order", Key: "B", Stream: "order:B", Handler: "P", State: admin.StateUnowned},
			{Category: "order", Key: "C", Stream: "order:C", Handler: "P", State: admin.StatePaused,
				Pause: &engine.PauseRecord{Reason: "migration", By: "ops@laptop", Since: time.Unix(100, 0), Until: time.Unix(700, 0)}},
		},
		HeadErr: &admin.NotFoundError{What: "head"},
		ActErr:  &engine.HeadMovedError{Expected: "5-0", Head: "6-0"},
	}
	src := &Source{Admin: fa}
	snap, err := src.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []tui.Partition{
		{Category: "order", Key: "A", Stream: "order:A", Handler: "P", Owner: "i1.2", Generation: 7, LeaseTTL: 900 * time.Millisecond,
			Lag: 3, Pending: 1, HeadAge: 1500 * time.Millisecond, State: "halted", HaltedEntryID: "5-0", Handled: 40},
		{Category: "order", Key: "B", Stream: "order:B", Handler: "P", State: "unowned"},
		{Category: "order", Key: "C", Stream: "order:C", Handler: "P", State: "paused",
			Pause: &tui.PauseInfo{Reason: "migration", By: "ops@laptop", Since: time.Unix(100, 0), Until: time.Unix(700, 0)}},
	}
	if diff := cmp.Diff(want, snap.Partitions); diff != "" {
		t.Errorf("partitions (-want +got):\n%s", diff)
	}
	if snap.Totals != nil {
		t.Errorf("totals of a deployment read whole = %+v, want none", snap.Totals)
	}
	fa.OverviewSampled = true
	if snap, err := src.Snapshot(context.Background()); err != nil || snap.Totals == nil || snap.Totals.Rows != 3 || snap.Totals.Streams != 3 {
		t.Errorf("a sampled overview: totals %+v, %v; want 3 rows of 3 streams", snap.Totals, err)
	}
	if _, ok := tui.Source(src).(tui.Pinger); !ok {
		t.Error("the source cannot tell a slow Redis from an unreachable one (no Ping)")
	}
	fa.Inspection = &admin.Inspection{Lanes: []admin.Lane{{Stream: "order:B", Length: 4}}}
	d, err := src.Head(context.Background(), tui.PartitionRef{Category: "order", Key: "B", Handler: "P"})
	if err != nil || d.EntryID != "" || len(d.Lanes) != 1 {
		t.Errorf("headless partition: %+v, %v", d, err)
	}
	if err := src.Skip(context.Background(), tui.PartitionRef{Category: "order", Key: "A", Handler: "P"}, "5-0"); !errors.Is(err, tui.ErrHeadMoved) {
		t.Errorf("skip of a moved head: err = %v, want ErrHeadMoved", err)
	}
	if len(fa.Actions) != 1 || fa.Actions[0].ExpectID != "5-0" || fa.Actions[0].Stream != "order:A" {
		t.Errorf("actions = %+v", fa.Actions)
	}

	// The DLQ and audit views.
	fa.DLQSummaries = []admin.DLQSummary{{Stream: "order:A", DLQStream: "order:A:dlq", Length: 2, OldestID: "1-0", NewestID: "2-0", OldestAgeMS: 1500}}
	ds, err := src.DLQs(context.Background())
	if diff := cmp.Diff([]tui.DLQInfo{{Stream: "order:A", Length: 2, OldestID: "1-0", NewestID: "2-0", OldestAge: 1500 * time.Millisecond}}, ds); err != nil || diff != "" {
		t.Errorf("DLQs (-want +got): %v\n%s", err, diff)
	}
	fa.Audit = cmdtest.SampleAudit()
	as, err := src.Audit(context.Background(), 50)
	if err != nil || len(as) != 2 || as[1].Outcome != admin.OutcomeOK || fa.AuditQuery.Limit != 50 {
		t.Errorf("audit = %+v, query %+v, %v", as, fa.AuditQuery, err)
	}
}
