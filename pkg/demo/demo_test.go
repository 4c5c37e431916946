package demo

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/seqctl/seqctl/pkg/engine"
)

// The demo on its embedded Redis handles events and, with poison now and then, shows a
// halted partition.
func TestDemoRunsOnEmbeddedRedis(t *testing.T) {
	d, err := Start(context.Background(), Options{Rate: 200, PoisonEvery: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if !d.Embedded || d.URL == "" {
		t.Fatalf("embedded = %v, url = %q", d.Embedded, d.URL)
	}
	deadline := time.Now().Add(20 * time.Second)
	var s Summary
	for time.Now().Before(deadline) {
		s = d.Summary()
		if s.Handled > 50 && s.Halted > 0 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Log(s)
	if s.Handled <= 50 || s.Halted == 0 {
		t.Fatalf("after 20s: %v; want events handled and a halted partition", s)
	}
	// The halt is visible through the engine's operator API on the same Redis.
	found := false
	for i := 1; i <= 12 && !found; i++ {
		h, err := d.broker.Halt(context.Background(), engine.HeadRef{Group: "OrderProjector", Category: "order", Key: "client-" + strconv.Itoa(i)})
		if err != nil {
			t.Fatal(err)
		}
		found = h != nil && h.Error != ""
	}
	if !found {
		t.Fatal("no halt record readable through the operator API")
	}
}

func TestDemoDomainFileIsTheEmbeddedOne(t *testing.T) {
	b, err := os.ReadFile("../../testdata/demo/domain.toml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, DomainTOML) {
		t.Fatal("testdata/demo/domain.toml differs from pkg/demo/domain.toml: copy one onto the other")
	}
}

// With the defaults, most partitions stay green for the first minutes: at most a third of
// the clients can have halted after three minutes.
func TestDefaultPoisonLeavesMostPartitionsGreen(t *testing.T) {
	var o Options
	period := o.PoisonPeriod()
	o.defaults()
	if halts := int((3 * time.Minute) / period); period <= 0 || halts > o.Clients/3 {
		t.Errorf("a poison order every %v: %d halts in 3 minutes of %d clients, want at most %d", period, halts, o.Clients, o.Clients/3)
	}
	if (Options{PoisonEvery: -1}).PoisonPeriod() != 0 {
		t.Error("no poison has a period")
	}
	if got := (Options{Rate: 100, PoisonEvery: 100}).PoisonPeriod(); got != 3*time.Second {
		t.Errorf("100 events/s, every 100th order: %v, want 3s", got)
	}
}
