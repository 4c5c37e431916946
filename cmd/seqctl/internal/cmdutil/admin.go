package cmdutil

import (
	"context"
	"io"
	"os"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/redisconn"
	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/config"
	"github.com/seqctl/seqctl/pkg/engine"
)

// Admin is the operator API the commands use. *admin.Admin implements it; tests use a
// fake.
type Admin interface {
	ListPartitions(ctx context.Context, f admin.Filter) ([]admin.Partition, error)
	EachPartition(ctx context.Context, f admin.Filter, fn func([]admin.Partition) error) error
	RebuildStateIndex(ctx context.Context, category string) ([]admin.StateIndexRebuild, error)
	Overview(ctx context.Context, limit int) (*admin.Overview, error)
	Ping(ctx context.Context) error
	Inspect(ctx context.Context, stream, handler string) (*admin.Inspection, error)
	Head(ctx context.Context, stream, handler string) (*admin.Head, error)
	Handlers(ctx context.Context, stream string) ([]string, error)
	Act(ctx context.Context, a admin.Action) (*admin.ActionResult, error)
	DLQ(ctx context.Context, stream string) ([]admin.DLQEntry, error)
	PlanReplay(ctx context.Context, stream, id string) (*admin.ReplayPlan, error)
	Replay(ctx context.Context, stream, id string, actor admin.Actor) (*admin.ReplayResult, error)
	Record(ctx context.Context, e admin.AuditEntry) error
	AuditEntries(ctx context.Context, q admin.AuditQuery) ([]admin.AuditEntry, error)
	DLQs(ctx context.Context) ([]admin.DLQSummary, error)
	PurgeDLQ(ctx context.Context, stream, through string, actor admin.Actor) (*admin.PurgeResult, error)
	Streams(ctx context.Context) ([]string, error)
	Instances(ctx context.Context) ([]admin.Instance, error)
	Groups(ctx context.Context, category string) ([]admin.Group, error)
	RemoveGroup(ctx context.Context, r admin.GroupRemoval) (*admin.GroupRemoved, error)
	Pause(ctx context.Context, req admin.PauseRequest) (*admin.PauseResult, error)
	Resume(ctx context.Context, req admin.PauseRequest) (*admin.PauseResult, error)
	PauseOf(ctx context.Context, stream, handler string) (*engine.PauseRecord, error)
	HandlerLimits() map[string]engine.HandlerLimit
	Limit(ctx context.Context, handler, value string) (*admin.Limit, error)
	Limits(ctx context.Context, q admin.LimitQuery) ([]admin.Limit, error)
	SetLimit(ctx context.Context, req admin.LimitRequest) (*admin.LimitResult, error)
	ClearLimit(ctx context.Context, req admin.LimitRequest) (*admin.LimitResult, error)
}

// AdminOpener connects the operator API; close releases it.
type AdminOpener func(ctx context.Context) (a Admin, close func(), err error)

// openAdmin returns f.OpenAdmin when set (tests), else connects to Redis as the global
// flags say.
func (f *Factory) openAdmin(ctx context.Context) (Admin, func(), error) {
	a, _, closeAdmin, err := f.OpenAdminAt(ctx)
	return a, closeAdmin, err
}

// OpenAdminAt is openAdmin that also returns the URL of the Redis it connected to,
// password masked, for top's header ("" with f.OpenAdmin, which names none).
func (f *Factory) OpenAdminAt(ctx context.Context) (Admin, string, func(), error) {
	if f.OpenAdmin != nil {
		a, closeAdmin, err := f.OpenAdmin(ctx)
		return a, "", closeAdmin, err
	}
	a, conn, closeAdmin, err := ConnectAdmin(ctx, f.Global, os.Getenv, f.IOStreams.ErrOut)
	if err != nil {
		return nil, "", nil, err
	}
	return a, conn.Shown, closeAdmin, nil
}

// ConnectAdmin connects the operator API as g says, the one way an operator command
// turns its flags, the environment (getenv) and the config into a Redis: it loads the
// config (when given) and connects (see redisconn.Connect), with warnings on errOut. It
// returns the connection it resolved too, and close, which releases the client.
func ConnectAdmin(ctx context.Context, g GlobalOptions, getenv func(string) string, errOut io.Writer) (Admin, *redisconn.Conn, func(), error) {
	var cfg *config.Config
	opts := admin.Options{}
	if g.ConfigPath != "" {
		var err error
		if cfg, err = config.Load(g.ConfigPath); err != nil {
			return nil, nil, nil, err
		}
		if opts, err = admin.FromConfig(cfg); err != nil {
			return nil, nil, nil, err
		}
	}
	conn, rdb, err := redisconn.Connect(ctx, g.RedisFlags(), cfg, getenv, errOut)
	if err != nil {
		return nil, nil, nil, err
	}
	return admin.New(rdb, opts), conn, func() { _ = rdb.Close() }, nil
}

var _ Admin = (*admin.Admin)(nil)
