package admin_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/pkg/admin"
)

// The head age of a listed partition is how far behind its handler is: the age, by
// Redis TIME, of the oldest pending entry, else of the next undelivered one, and 0 when
// the handler is caught up.
func TestListPartitionsHeadAge(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	// ago is an entry id appended ms milliseconds before the Redis time read above.
	ago := func(ms int64) string { return fmt.Sprintf("%d-0", now.UnixMilli()-ms) }
	rdb.SAdd(ctx, "order:__partitions__", "lagging", "pending", "caught-up", "unread", "gap")
	rdb.SAdd(ctx, "order:__groups__", "H")
	for _, id := range []string{ago(1200), ago(1100), ago(1000)} {
		addEntry(t, rdb, "order:lagging", id)
	}
	for _, id := range []string{ago(3000), ago(2000)} {
		addEntry(t, rdb, "order:pending", id)
	}
	addEntry(t, rdb, "order:caught-up", ago(5000))
	for _, id := range []string{ago(900), ago(800), ago(700)} {
		addEntry(t, rdb, "order:gap", id)
	}
	addEntry(t, rdb, "order:unread", ago(4000)) // no group yet: created on first read
	for _, s := range []string{"order:lagging", "order:pending", "order:caught-up", "order:gap"} {
		if err := rdb.XGroupCreate(ctx, s, "H", "0").Err(); err != nil {
			t.Fatal(err)
		}
	}
	// An entry deleted inside the undelivered range: Redis no longer counts the lag.
	if err := rdb.XDel(ctx, "order:gap", ago(800)).Err(); err != nil {
		t.Fatal(err)
	}
	readOne := func(stream string) {
		t.Helper()
		if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "H", Consumer: "c", Streams: []string{stream, ">"}, Count: 1}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	readOne("order:pending")
	readOne("order:caught-up")
	if err := rdb.XAck(ctx, "order:caught-up", "H", ago(5000)).Err(); err != nil {
		t.Fatal(err)
	}

	ps, err := admin.New(rdb, admin.Options{}).ListPartitions(ctx, admin.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]admin.Partition{}
	for _, p := range ps {
		got[p.Key] = p
	}
	tests := []struct {
		key            string
		lag, pending   int64
		headID         string
		minAge, maxAge int64 // milliseconds
	}{
		{"lagging", 3, 0, ago(1200), 1200, 10000},
		{"pending", 1, 1, ago(3000), 3000, 10000}, // the pending entry, not the next undelivered one
		{"caught-up", 0, 0, "", 0, 0},
		{"unread", 1, 0, ago(4000), 4000, 10000},
		{"gap", -1, 0, ago(900), 900, 10000}, // the lag is unknown, the head's age is not
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			p, ok := got[tt.key]
			if !ok {
				t.Fatalf("order:%s not listed: %+v", tt.key, ps)
			}
			if p.Lag != tt.lag || p.Pending != tt.pending || p.HeadID != tt.headID {
				t.Errorf("lag %d, pending %d, head %q; want %d, %d, %q", p.Lag, p.Pending, p.HeadID, tt.lag, tt.pending, tt.headID)
			}
			if p.HeadAgeMS < tt.minAge || p.HeadAgeMS > tt.maxAge {
				t.Errorf("head age %d ms, want %d to %d", p.HeadAgeMS, tt.minAge, tt.maxAge)
			}
		})
	}
}
