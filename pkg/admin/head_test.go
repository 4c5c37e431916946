package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/engine"
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

// A batch handler retries a run in one delivery, then splits it on the last attempt: the
// poison event it halts on was delivered once but attempted twice. The head shows the
// attempts the halt record counted, not the smaller delivery count.
func TestHeadOfABatchHaltCountsItsAttempts(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	b := engine.NewRedisBroker(rdb)
	fn := poisonHandler(srv.Client(t))
	d := engine.NewDomain("test").
		AddEvent(engine.EventType{Name: "OrderPlaced", Category: "order", Fields: []string{"client_id", "seq", "poison"}}).
		AddHandler(engine.Handler{Name: "Projector", Kind: engine.EventHandlerKind, PartOf: "order", Handles: []string{"OrderPlaced"},
			SequentialBy: "client_id", MaxRetries: 2, RetryDelay: 10 * time.Millisecond, BatchMax: 8,
			BatchFunc: func(ctx context.Context, evs []engine.Event) error {
				// All or nothing: a run holding the poison applies none of its events.
				for _, ev := range evs {
					if strings.Contains(string(ev.Data), `"poison":true`) {
						return fn(ctx, ev)
					}
				}
				for _, ev := range evs {
					if err := fn(ctx, ev); err != nil {
						return err
					}
				}
				return nil
			}})
	if err := d.Init(engine.NewRedisBroker(nil)); err != nil {
		t.Fatal(err)
	}
	// Published before the engine starts, so that its first read takes all of them in one run.
	var poison engine.Published
	for seq := 0; seq < 4; seq++ {
		p := publish(t, b, d, "A", seq, seq == 2)
		if seq == 2 {
			poison = p
		}
	}
	startEngine(t, srv, d, "i1")
	waitHalted(t, b, "A")

	h, err := admin.New(rdb, admin.Options{}).Head(context.Background(), "order:A", "Projector")
	if err != nil {
		t.Fatal(err)
	}
	if h.ID != poison.EntryID || h.Status != admin.HeadHalted || h.Attempts != 2 {
		t.Errorf("head = id %s status %s attempts %d, want the poison entry %s, halted after 2 attempts", h.ID, h.Status, h.Attempts, poison.EntryID)
	}
	if got := logOf(t, rdb, "A"); strings.Join(got, ",") != "0,1" {
		t.Errorf("applied %v, want the two events before the poison, once each", got)
	}
}
