package admin_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/pkg/admin"
)

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
