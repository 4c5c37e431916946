package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/testkit"
)

// A handler whose sink refuses its generation (an inbox that saw a newer owner) returns an
// error wrapping ErrFenced: the worker gives the partition up as on a lost lease, the
// attempt does not count toward a halt, and the event runs again under the lease the
// partition has next (here the same instance's, taken again).
func TestSinkRefusalIsALostLeaseNotAFailure(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	b := NewRedisBroker(rdb)
	var runs, refused atomic.Int32
	var handled atomic.Value
	h := func(ctx context.Context, ev Event) error {
		runs.Add(1)
		if refused.Add(1) == 1 {
			return fmt.Errorf("the sink saw a newer owner: %w", ErrFenced)
		}
		var p testPayload
		_ = json.Unmarshal(ev.Data, &p)
		handled.Store(p.Seq)
		return nil
	}
	d := testDomain(t, h, func(d *Domain) { d.Handlers[0].MaxRetries = 1 })
	startEngine(t, srv, d, "i1", 2*time.Second)
	publish(t, b, d, "K", 7, false)
	testkit.WaitFor(t, 20*time.Second, "the event handled after the refusal", func() bool { return handled.Load() == 7 })
	if h, err := b.Halt(context.Background(), HeadRef{Group: "Projector", Category: "order", Key: "K"}); err != nil || h != nil {
		t.Fatalf("halt record %+v (%v): a refusal by the sink must not halt the partition", h, err)
	}
	if n := runs.Load(); n != 2 {
		t.Errorf("the handler ran %d times, want 2 (the refused run and the one after)", n)
	}
}
