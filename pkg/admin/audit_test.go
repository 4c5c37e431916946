package admin_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/engine"
)

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

// The audit log names the Redis ACL user an action ran as, next to the OS user.
func TestRecordRedisUser(t *testing.T) {
	srv := redistest.StartWith(t, redistest.Options{Users: []string{
		"ACL SETUSER ops on >pw ~* +@all",
		"ACL SETUSER mute on >pw ~* +@all -acl",
	}})
	ctx := context.Background()
	for _, tt := range []struct{ user, want string }{{"ops", "ops"}, {"mute", "?"}} {
		t.Run(tt.user, func(t *testing.T) {
			opt, err := redis.ParseURL(srv.UserURL(tt.user, "pw"))
			if err != nil {
				t.Fatal(err)
			}
			rdb := redis.NewClient(opt)
			defer rdb.Close()
			a := admin.New(rdb, admin.Options{})
			if err := a.Record(ctx, admin.AuditEntry{User: "alice", Host: "h", Command: "head skip", Outcome: admin.OutcomeOK}); err != nil {
				t.Fatal(err)
			}
			got, err := a.AuditEntries(ctx, admin.AuditQuery{})
			if err != nil {
				t.Fatal(err)
			}
			last := got[len(got)-1]
			if last.User != "alice" || last.RedisUser != tt.want {
				t.Fatalf("recorded user %q, redis user %q; want alice, %q", last.User, last.RedisUser, tt.want)
			}
		})
	}
}

func TestOutcomeOf(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("admin: wrapped: %w", err) }
	tests := []struct {
		err         error
		want, group string
	}{
		{nil, admin.OutcomeOK, admin.OutcomeOK},
		{wrap(engine.ErrHeadMoved), admin.OutcomeHeadMoved, admin.OutcomeHeadMoved},
		{engine.ErrNotHalted, admin.OutcomeNotHalted, admin.OutcomeNotHalted},
		{wrap(engine.ErrEntryGone), admin.OutcomeEntryGone, admin.OutcomeEntryGone},
		{&admin.NotFoundError{What: "handler", Name: "X"}, admin.OutcomeNotFound, admin.OutcomeNotFound},
		{wrap(engine.ErrNoOverride), admin.OutcomeNotFound, admin.OutcomeNotFound},
		{&admin.NoLimitError{Handler: "X"}, admin.OutcomeFailed, admin.OutcomeFailed},
		{wrap(engine.ErrReplicaShortfall), admin.OutcomeNotReplicated, admin.OutcomeNotReplicated},
		{wrap(engine.ErrGroupNotRegistered), admin.OutcomeFailed, admin.OutcomeNotRegistered},
		{engine.ErrGroupLive, admin.OutcomeFailed, admin.OutcomeLiveLease},
		{wrap(engine.ErrGroupRead), admin.OutcomeFailed, admin.OutcomeReadMoved},
		{admin.ErrGroupDeclared, admin.OutcomeFailed, admin.OutcomeDeclared},
		{errors.New("connection refused"), admin.OutcomeFailed, admin.OutcomeFailed},
	}
	for _, tt := range tests {
		if got := admin.OutcomeOf(tt.err); got != tt.want {
			t.Errorf("OutcomeOf(%v) = %q, want %q", tt.err, got, tt.want)
		}
		if got := admin.GroupOutcomeOf(tt.err); got != tt.group {
			t.Errorf("GroupOutcomeOf(%v) = %q, want %q", tt.err, got, tt.group)
		}
	}
}

func TestActorEntry(t *testing.T) {
	got := admin.Actor{User: "alice", Host: "ops-1", Command: "head skip"}.Entry()
	if want := (admin.AuditEntry{User: "alice", Host: "ops-1", Command: "head skip"}); got != want {
		t.Errorf("Entry() = %+v, want %+v", got, want)
	}
}
