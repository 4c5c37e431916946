package admin_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/pkg/admin"
)

// addEntry appends an OrderPlaced entry with the given id to a stream.
func addEntry(t *testing.T, rdb *redis.Client, stream, id string) {
	t.Helper()
	if err := rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: stream, ID: id, Values: []any{"type", "OrderPlaced"}}).Err(); err != nil {
		t.Fatal(err)
	}
}

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

func TestAuditEntries(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	adm := admin.New(rdb, admin.Options{})
	for i := 0; i < 1200; i++ {
		e := admin.AuditEntry{User: "u", Command: "head skip", Stream: "order:a", Outcome: admin.OutcomeOK, EntryID: "1-0"}
		if i%3 == 0 {
			e.Stream, e.Outcome = "order:b", admin.OutcomeHeadMoved
		}
		if i == 1199 {
			e.Command, e.Stream = "dlq purge", "order:b:dlq"
		}
		if err := adm.Record(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	all, _ := adm.AuditEntries(ctx, admin.AuditQuery{})
	if len(all) != 1200 || all[0].ID > all[1].ID {
		t.Fatalf("all: %d entries, oldest first? %v", len(all), len(all) > 1 && all[0].ID < all[1].ID)
	}
	tests := []struct {
		name   string
		q      admin.AuditQuery
		want   int
		newest string // the first entry's id
	}{
		{"limit: newest first", admin.AuditQuery{Limit: 3}, 3, all[1199].ID},
		{"limit across pages with a filter", admin.AuditQuery{Limit: 450, Outcome: admin.OutcomeHeadMoved}, 400, all[1197].ID},
		{"stream matches its DLQ too", admin.AuditQuery{Limit: 1, Stream: "order:b"}, 1, all[1199].ID},
		{"outcome without a limit", admin.AuditQuery{Outcome: admin.OutcomeOK}, 800, all[1].ID},
		{"since", admin.AuditQuery{Since: time.Hour, Stream: "order:a"}, 799, all[1].ID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := adm.AuditEntries(ctx, tt.q)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tt.want || got[0].ID != tt.newest {
				t.Errorf("%d entries starting %s, want %d starting %s", len(got), got[0].ID, tt.want, tt.newest)
			}
		})
	}
}

// A partition published before braces were refused in keys is still listed, so an
// operator sees it (the engine's discovery decides whether it is still read).
func TestListPartitionsKeepsLegacyKeys(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	rdb.SAdd(ctx, "order:__partitions__", "{legacy}", "client-1")
	rdb.SAdd(ctx, "order:__groups__", "H")
	addEntry(t, rdb, "order:{legacy}", "1-0")
	addEntry(t, rdb, "order:client-1", "1-0")
	ps, err := admin.New(rdb, admin.Options{}).ListPartitions(ctx, admin.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, p := range ps {
		keys = append(keys, p.Key)
	}
	if diff := cmp.Diff([]string{"client-1", "{legacy}"}, keys); diff != "" {
		t.Errorf("keys (-want +got):\n%s", diff)
	}
	if _, err := admin.New(rdb, admin.Options{}).ParseStream("order:{legacy}"); err != nil {
		t.Errorf("ParseStream of a legacy key: %v", err)
	}
}
