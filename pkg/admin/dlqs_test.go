package admin_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

func TestDLQsAndPurge(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	adm := admin.New(rdb, admin.Options{})
	addEntry(t, rdb, "order:client-10:dlq", "1000-0")
	addEntry(t, rdb, "order:client-2:dlq", "1000-0")
	addEntry(t, rdb, "order:client-2:dlq", "2000-0")
	addEntry(t, rdb, "order:client-2:dlq", "2000-1")
	// Not partition DLQs: a category DLQ name, a string, a stream that is no DLQ.
	addEntry(t, rdb, "order:dlq", "1-0")
	rdb.Set(ctx, "x:y:dlq", "v", 0)
	addEntry(t, rdb, "order:client-3", "1-0")

	got, err := adm.DLQs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		Stream         string
		Length         int64
		Oldest, Newest string
		HasAge         bool
	}
	var rows []row
	for _, s := range got {
		rows = append(rows, row{s.Stream, s.Length, s.OldestID, s.NewestID, s.OldestAgeMS > 0})
		if s.DLQStream != s.Stream+":dlq" || s.Category != "order" {
			t.Errorf("summary %+v", s)
		}
	}
	want := []row{{"order:client-2", 3, "1000-0", "2000-1", true}, {"order:client-10", 1, "1000-0", "1000-0", true}}
	if diff := cmp.Diff(want, rows); diff != "" {
		t.Errorf("DLQs (-want +got):\n%s", diff)
	}

	// Purge through 2000-0: 2000-1 came later and stays.
	who := admin.Actor{User: "alice", Host: "ops-1", Command: "dlq purge"}
	res, err := adm.PurgeDLQ(ctx, "order:client-2", "2000-0", who)
	if err != nil {
		t.Fatal(err)
	}
	if res.Removed != 2 || res.Left != 1 || res.Outcome != admin.OutcomeOK || res.DLQStream != "order:client-2:dlq" {
		t.Errorf("purge = %+v, want 2 removed and 1 left", res)
	}
	left, _ := rdb.XRange(ctx, "order:client-2:dlq", "-", "+").Result()
	if len(left) != 1 || left[0].ID != "2000-1" {
		t.Errorf("left in the DLQ: %v, want 2000-1", left)
	}
	// Purge through a millisecond alone takes every entry of it.
	if res, err = adm.PurgeDLQ(ctx, "order:client-2", "2000", who); err != nil || res.Removed != 1 || res.Left != 0 {
		t.Errorf("purge through 2000 = %+v, %v", res, err)
	}
	if _, err := adm.PurgeDLQ(ctx, "order:a:b:c", "1-0", who); err == nil {
		t.Error("a purge of an invalid stream succeeded")
	}

	entries, err := adm.AuditEntries(ctx, admin.AuditQuery{Limit: 5})
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 3 || entries[0].Command != "dlq purge" || entries[0].Outcome == admin.OutcomeOK && entries[0].EntryID != "1-0" {
		t.Errorf("audit = %+v", entries)
	}
	if entries[1].Detail != "removed 1 entries of order:client-2:dlq through 2000; 0 left" ||
		entries[2].Detail != "removed 2 entries of order:client-2:dlq through 2000-0; 1 left" || entries[1].Stream != "order:client-2" {
		t.Errorf("audit = %+v, %+v", entries[1], entries[2])
	}
}

// A purge is done even when its audit record cannot be written: the result says so. A
// purge that fails returns its own error, not the audit's.
func TestPurgeWarnsWhenTheAuditRecordIsNotWritten(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	adm := admin.New(rdb, admin.Options{})
	addEntry(t, rdb, "order:client-1:dlq", "1000-0")
	// XADD to a string fails with WRONGTYPE.
	if err := rdb.Set(ctx, keyspace.SingleNode.AuditStream(), "not a stream", 0).Err(); err != nil {
		t.Fatal(err)
	}
	who := admin.Actor{User: "alice", Host: "ops-1", Command: "dlq purge"}
	res, err := adm.PurgeDLQ(ctx, "order:client-1", "1000-0", who)
	if err != nil {
		t.Fatal(err)
	}
	if res.Removed != 1 || res.Outcome != admin.OutcomeOK ||
		!strings.HasPrefix(res.Warning, "the audit record was not written: ") || !strings.Contains(res.Warning, "WRONGTYPE") {
		t.Errorf("purge = %+v, want done with a warning about the audit record", res)
	}
	if _, err := adm.PurgeDLQ(ctx, "order:client-1", "not-an-id", who); err == nil || strings.Contains(err.Error(), "WRONGTYPE") {
		t.Errorf("a failed purge returned %v, want its own error", err)
	}
}
