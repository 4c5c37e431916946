package admin_test

import (
	"context"
	"strings"
	"testing"

	"github.com/seqctl/seqctl/pkg/admin"
)

func TestInstances(t *testing.T) {
	w := haltedWorld(t)
	ins, err := admin.New(w.rdb, admin.Options{}).Instances(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(ins) != 1 || ins[0].ID != "i1" || !strings.HasPrefix(ins[0].Owner, "i1.") || !ins[0].Live || ins[0].SessionTTLMS <= 0 ||
		ins[0].PID == 0 || ins[0].HeartbeatAt.IsZero() {
		t.Errorf("instances = %+v", ins)
	}
}
