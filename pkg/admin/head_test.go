package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/admin"
)

func TestHeadAndInspect(t *testing.T) {
	w := haltedWorld(t)
	ctx := context.Background()
	adm := admin.New(w.rdb, admin.Options{})

	h, err := adm.Head(ctx, "order:A", "Projector")
	if err != nil {
		t.Fatal(err)
	}
	if h.ID != w.poison.EntryID || h.Status != admin.HeadHalted || h.Attempts != 2 || h.Lane != "order:A" ||
		!strings.Contains(h.LastError, "poison payload A/2") || h.HaltedSince == nil {
		t.Errorf("head = %+v, want the halted poison entry after 2 attempts with its error", h)
	}
	if h.Envelope.Type != "OrderPlaced" || h.Envelope.ID != w.poison.EventID || string(h.Envelope.Data) != `{"client_id":"A","seq":2,"poison":true}` {
		t.Errorf("head envelope = %+v", h.Envelope)
	}
	// Mailer never read: its head is the first entry, not delivered.
	h, err = adm.Head(ctx, "order:A", "Mailer")
	if err != nil {
		t.Fatal(err)
	}
	if h.ID != w.first.EntryID || h.Status != admin.HeadUndelivered || h.Attempts != 0 {
		t.Errorf("Mailer head = %+v, want the first entry, undelivered", h)
	}
	// B is caught up for the Projector.
	testkit.WaitFor(t, 5*time.Second, "order:B caught up", func() bool {
		_, err := adm.Head(ctx, "order:B", "Projector")
		return errors.Is(err, admin.ErrNotFound)
	})
	if _, err := adm.Head(ctx, "order:A", "Nobody"); !errors.Is(err, admin.ErrNotFound) || !strings.Contains(err.Error(), "Mailer, Projector") {
		t.Errorf("unknown handler: err = %v, want not found naming the handlers", err)
	}
	var nf *admin.NotFoundError
	if _, err := adm.Head(ctx, "order:Z", "Projector"); !errors.As(err, &nf) || nf.What != "partition" {
		t.Errorf("head of an unknown partition: err = %v, want partition not found", err)
	}
	if _, err := adm.Head(ctx, "order:a:b:c", "Projector"); !errors.Is(err, admin.ErrInvalidStream) {
		t.Errorf("bad stream: err = %v, want ErrInvalidStream", err)
	}

	in, err := adm.Inspect(ctx, "order:A", "")
	if err != nil {
		t.Fatal(err)
	}
	if !in.Indexed || len(in.Lanes) != 1 || in.Lanes[0].Length != 5 || in.DLQStream != "order:A:dlq" || len(in.Handlers) != 2 {
		t.Fatalf("inspection = %+v", in)
	}
	var proj admin.HandlerState
	for _, hs := range in.Handlers {
		if hs.Handler == "Projector" {
			proj = hs
		}
	}
	if proj.State != admin.StateHalted || proj.Halt == nil || proj.Lease == nil || !proj.Lease.Live || proj.Lease.Instance != "i1" ||
		proj.Head == nil || proj.Head.ID != w.poison.EntryID || proj.PendingTotal < 1 || int(proj.PendingTotal) != len(proj.Pending) ||
		proj.Pending[0].ID != w.poison.EntryID || proj.Pending[0].Deliveries != 2 {
		t.Errorf("Projector state = %+v", proj)
	}
	if _, err := adm.Inspect(ctx, "order:Z", ""); !errors.Is(err, admin.ErrNotFound) {
		t.Errorf("inspect of an unknown partition: err = %v, want not found", err)
	}
}

// Absent times are null in the JSON of a head and a DLQ entry, not missing.
func TestAbsentTimesAreNull(t *testing.T) {
	for _, v := range []any{admin.Head{}, admin.DLQEntry{}} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{`"halted_since":null`, `"published_at":null`} {
			if !strings.Contains(string(b), f) {
				t.Errorf("%T JSON lacks %s: %s", v, f, b)
			}
		}
	}
	b, _ := json.Marshal(admin.DLQEntry{})
	if !strings.Contains(string(b), `"moved_at":null`) {
		t.Errorf("DLQ entry JSON lacks moved_at null: %s", b)
	}
}
