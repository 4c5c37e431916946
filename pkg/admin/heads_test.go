package admin_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/engine"
)

// TestHeadRetries retries, one at a time, a halted partition, one that has caught up and
// one that does not exist: the first is retried, the second skipped and the third
// refused, and the audit log has a record of each.
func TestHeadRetries(t *testing.T) {
	w := haltedWorld(t)
	ctx := context.Background()
	adm := admin.New(w.rdb, admin.Options{})
	r := &admin.HeadRetries{API: adm, Actor: admin.Actor{User: "ops", Host: "laptop", Command: "head retry"}, Reason: "OPS-7"}

	rep, err := r.Retry(ctx, "order:A", "Projector")
	if err != nil || rep.Outcome != admin.OutcomeOK || rep.EntryID != w.poison.EntryID || rep.Skipped != "" || rep.Error != "" {
		t.Fatalf("retry of order:A = %+v, %v; want retried at %s", rep, err, w.poison.EntryID)
	}
	rep, err = r.Retry(ctx, "order:B", "Projector")
	if err != nil || rep.Outcome != admin.OutcomeNotHalted || !strings.Contains(rep.Skipped, "caught up") {
		t.Fatalf("retry of order:B = %+v, %v; want skipped, caught up", rep, err)
	}
	rep, err = r.Retry(ctx, "order:Z", "Projector")
	if err != nil || rep.Outcome != admin.OutcomeNotFound || rep.Err == nil || rep.Error != rep.Err.Error() {
		t.Fatalf("retry of order:Z = %+v, %v; want refused, not found", rep, err)
	}
	if r.Retried != 1 || r.Skipped != 1 || r.Refused != 1 {
		t.Errorf("counts retried %d, skipped %d, refused %d; want 1 each", r.Retried, r.Skipped, r.Refused)
	}
	entries, err := adm.AuditEntries(ctx, admin.AuditQuery{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range entries {
		if e.Command != "head retry" || e.User != "ops" || e.Reason != "OPS-7" || e.Handler != "Projector" {
			t.Errorf("audit entry %+v: want head retry by ops for OPS-7, handler Projector", e)
		}
		got[e.Stream] = e.Outcome
	}
	want := map[string]string{"order:A": admin.OutcomeOK, "order:B": admin.OutcomeNotHalted, "order:Z": admin.OutcomeNotFound}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("audit outcomes by stream = %v, want %v", got, want)
	}
}

// heads is a HeadAPI with canned answers.
type heads struct {
	head      *admin.Head
	headErr   error
	actErr    error
	recordErr error
	acts      int
	records   []admin.AuditEntry
}

func (h *heads) Head(context.Context, string, string) (*admin.Head, error) { return h.head, h.headErr }

func (h *heads) Act(_ context.Context, a admin.Action) (*admin.ActionResult, error) {
	h.acts++
	if h.actErr != nil {
		return nil, h.actErr
	}
	return &admin.ActionResult{Action: a.Kind, Stream: a.Stream, Handler: a.Handler, EntryID: a.ExpectID, Done: admin.Done{Outcome: admin.OutcomeOK}}, nil
}

func (h *heads) Record(_ context.Context, e admin.AuditEntry) error {
	h.records = append(h.records, e)
	return h.recordErr
}

// TestHeadRetriesEachCase checks each way a partition goes: retried, skipped before or at
// the act, refused (recorded only when Act did not run), and stopping the whole retry.
func TestHeadRetriesEachCase(t *testing.T) {
	halted := &admin.Head{ID: "5-0", Status: admin.HeadHalted}
	unavailable := fmt.Errorf("%w: EOF", engine.ErrRedisUnavailable)
	for _, tt := range []struct {
		name    string
		api     *heads
		stops   error
		outcome string
		acts    int
		records int
		skipped bool
		refused bool
	}{
		{name: "retried", api: &heads{head: halted}, outcome: admin.OutcomeOK, acts: 1},
		{name: "delivering", api: &heads{head: &admin.Head{ID: "5-0", Status: "delivering"}}, outcome: admin.OutcomeNotHalted, records: 1, skipped: true},
		{name: "caught up", api: &heads{headErr: &admin.NotFoundError{What: "head", Name: "order:a"}}, outcome: admin.OutcomeNotHalted, records: 1, skipped: true},
		{name: "moved at the act", api: &heads{head: halted, actErr: engine.ErrHeadMoved}, outcome: admin.OutcomeHeadMoved, acts: 1, skipped: true},
		{name: "resumed at the act", api: &heads{head: halted, actErr: engine.ErrNotHalted}, outcome: admin.OutcomeNotHalted, acts: 1, skipped: true},
		{name: "refused at the act", api: &heads{head: halted, actErr: engine.ErrFenced}, outcome: admin.OutcomeOf(engine.ErrFenced), acts: 1, refused: true},
		{name: "refused before", api: &heads{headErr: &admin.NotFoundError{What: "partition", Name: "order:a"}}, outcome: admin.OutcomeNotFound, records: 1, refused: true},
		{name: "unavailable", api: &heads{headErr: unavailable}, stops: engine.ErrRedisUnavailable},
		{name: "unavailable at the act", api: &heads{head: halted, actErr: unavailable}, stops: engine.ErrRedisUnavailable, acts: 1},
		{name: "cancelled", api: &heads{headErr: context.Canceled}, stops: context.Canceled},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := &admin.HeadRetries{API: tt.api, Actor: admin.Actor{User: "ops", Command: "head retry"}, Reason: "why"}
			rep, err := r.Retry(context.Background(), "order:a", "H")
			if tt.stops != nil {
				if !errors.Is(err, tt.stops) {
					t.Fatalf("err = %v, want %v", err, tt.stops)
				}
			} else if err != nil {
				t.Fatal(err)
			} else if rep.Outcome != tt.outcome || (rep.Skipped != "") != tt.skipped || (rep.Err != nil) != tt.refused {
				t.Errorf("report %+v: want outcome %s, skipped %v, refused %v", rep, tt.outcome, tt.skipped, tt.refused)
			}
			if tt.api.acts != tt.acts || len(tt.api.records) != tt.records {
				t.Errorf("%d acts, %d records; want %d, %d", tt.api.acts, len(tt.api.records), tt.acts, tt.records)
			}
			for _, rec := range tt.api.records {
				if rec.Stream != "order:a" || rec.Handler != "H" || rec.Reason != "why" || rec.User != "ops" || rec.Outcome != tt.outcome {
					t.Errorf("record %+v", rec)
				}
			}
			want := 0
			if tt.stops == nil && !tt.skipped && !tt.refused {
				want = 1
			}
			if r.Retried != want {
				t.Errorf("retried %d, want %d", r.Retried, want)
			}
		})
	}
}

// TestHeadRetriesAuditWarning: a record that cannot be written is a warning of the
// partition, not a failure.
func TestHeadRetriesAuditWarning(t *testing.T) {
	api := &heads{headErr: &admin.NotFoundError{What: "head"}, recordErr: errors.New("NOPERM")}
	r := &admin.HeadRetries{API: api}
	rep, err := r.Retry(context.Background(), "order:a", "H")
	if err != nil || rep.AuditWarning != "not recorded in the audit log: NOPERM" {
		t.Errorf("report %+v, %v; want the warning of the lost record", rep, err)
	}
}
