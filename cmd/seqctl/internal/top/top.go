// Package top is 'seqctl top': the live dashboard of partitions, owners, generations, lag
// and halts, over the operator API (Source, which 'seqctl dev' shares).
package top

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/engine"
	"github.com/seqctl/seqctl/pkg/keyspace"
	"github.com/seqctl/seqctl/pkg/tui"
)

// Options are the options of seqctl top.
type Options struct {
	IO       *cmdutil.IOStreams
	Refresh  time.Duration
	ReadOnly bool
	// open connects the operator API and returns the URL of the Redis it connected to
	// (password masked), which the header shows.
	open func(ctx context.Context) (a cmdutil.Admin, shown string, close func(), err error)
}

// NewCmd returns the 'seqctl top' command; runF, when not nil, runs in place of
// its work with the options the flags gave (tests).
func NewCmd(f *cmdutil.Factory, runF func(*Options) error) *cobra.Command {
	opts := &Options{IO: f.IOStreams, open: f.OpenAdminAt}
	cmd := &cobra.Command{
		Use:   "top",
		Short: "Live dashboard of partitions, owners, generations, lag and halts",
		Long: `top shows a live deployment: every (handler, partition) with its owner, lease
generation (a long one as its last six digits, …789012; the detail pane shows it whole),
lease time left, lag, pending entries, head age and state, halted partitions pinned
first; the instances; every DLQ with its length; the newest operator actions of the
audit log; and the head of the selected partition. The header counts partitions as
the CLI does (partition streams) and the table's rows (one per handler and partition).
Owners are session owners (instance.N), as 'seqctl partitions list' prints them.

Above 2,000 rows (handler, partition) a refresh does not read every partition: it shows
every halted, paused and throttled partition (from the state indexes, see 'seqctl
partitions list --rebuild-index', and the instances' registry), the partition and row
totals counted in Redis, and a sample of the rest; the header says which counts are the
sample's. A refresh that runs out of time while Redis answers a PING is shown as slow,
with the last data, not as Redis unreachable.

A halted head can be skipped (s), moved to its DLQ (d) or retried (r) from the dashboard,
each after a confirmation that names the head entry id, and as a compare-and-act on it:
if the head moved meanwhile, nothing is done. P pauses the selected partition for its
handler (it asks the reason; see 'seqctl partitions pause') and U resumes it.
--readonly turns the actions off.

The dashboard opens on the first row, where halted partitions are pinned, and the
cursor stays on that row until you move it or open a partition. From then on the
selection stays on the partition you chose while the rows re-sort; if it leaves the
list, no key acts until you move the cursor. Messages fade after a few seconds.

Filter (/): every word must match; text matches the key, category, handler, owner or
state; field:text one field (key, category, handler, owner, state, stream); /regexp/
and field:/regexp/ a regular expression, e.g. owner:w1 key:/^client-1[0-9]$/.

Keys: arrows/j/k move, enter detail, tab partitions/instances/DLQ/audit, o sort by the
next column, O reverse, / filter, p pause, ? help, q quit.`,
		Example: `  # watch the local deployment
  $ seqctl top --redis-url redis://127.0.0.1:6379/0

  # watch without the power to change anything, refreshing every 2 s
  $ seqctl top --config domain.toml --readonly --refresh 2s`,
		Args: cobra.NoArgs,
		RunE: cmdutil.RunE(opts, func(*cobra.Command, []string) error {
			if opts.Refresh <= 0 {
				return &cmdutil.ExitError{Code: cmdutil.ExitUsage, Err: errors.New("--refresh must be positive, e.g. 1s")}
			}
			return nil
		}, runF, topRun),
	}
	cmd.Flags().DurationVar(&opts.Refresh, "refresh", time.Second, "refresh interval")
	cmd.Flags().BoolVar(&opts.ReadOnly, "readonly", false, "disable skip / DLQ / retry")
	return cmd
}

func topRun(ctx context.Context, opts *Options) error {
	ctx = cmdutil.OrBackground(ctx)
	a, shown, closeAdmin, err := opts.open(ctx)
	if err != nil {
		return err
	}
	defer closeAdmin()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	return tui.Run(ctx, tui.Options{
		Source:   &Source{Admin: a, Actor: cmdutil.Actor("top")},
		Refresh:  opts.Refresh,
		ReadOnly: opts.ReadOnly,
		NoColor:  !opts.IO.Color,
		Addr:     shown, // the Redis connected to, not resolved again
	}, opts.IO.In, opts.IO.Out)
}

// Source adapts the operator API to the dashboard's Source.
type Source struct {
	Admin cmdutil.Admin
	Actor admin.Actor
}

// overviewRows bounds the rows a refresh reads beyond the halted, paused and throttled
// partitions: a deployment with more is sampled (admin.Overview), so that the dashboard
// opens and refreshes in about the same time at a million partitions as at a thousand.
const overviewRows = 2000

// Snapshot reads the deployment through admin.Overview: every partition up to
// overviewRows, above that the halted, paused and throttled ones and a sample.
func (s *Source) Snapshot(ctx context.Context) (tui.Snapshot, error) {
	ov, err := s.Admin.Overview(ctx, overviewRows)
	if err != nil {
		return tui.Snapshot{}, err
	}
	parts := ov.Partitions
	insts, err := s.Admin.Instances(ctx)
	if err != nil {
		return tui.Snapshot{}, err
	}
	snap := tui.Snapshot{Taken: time.Now()}
	if ov.Sampled {
		snap.Totals = &tui.Totals{Streams: ov.Streams, Rows: ov.Rows, Unindexed: len(ov.Unindexed) > 0}
	}
	owned := map[string]int{}
	for _, p := range parts {
		inst := keyspace.InstanceOfOwner(p.Owner)
		if inst != "" {
			owned[inst]++
		}
		snap.Partitions = append(snap.Partitions, tui.Partition{
			Category: p.Category, Key: p.Key, Stream: p.Stream, Handler: p.Handler,
			Owner: p.Owner, Generation: p.Generation, // the session owner, as 'partitions list' prints it
			LeaseTTL: time.Duration(p.LeaseRemainingMS) * time.Millisecond,
			Lag:      p.Lag, Pending: p.Pending,
			HeadAge:       time.Duration(p.HeadAgeMS) * time.Millisecond,
			State:         string(p.State),
			HaltedEntryID: p.HaltedEntryID,
			Handled:       p.Handled,
			Pause:         pauseInfo(p.Pause),
			LimitValue:    p.LimitValue,
		})
	}
	for _, in := range insts {
		if !in.Live {
			continue
		}
		snap.Instances = append(snap.Instances, tui.Instance{
			ID: in.ID, Host: in.Host, PID: in.PID, Owned: owned[in.ID], LastHeartbeat: in.HeartbeatAt,
			SlotsInUse: in.SlotsInUse, SlotsLimit: in.SlotsLimit, SlotsWaiting: in.SlotsWaiting,
		})
	}
	return snap, nil
}

func (s *Source) Head(ctx context.Context, p tui.PartitionRef) (tui.HeadDetail, error) {
	stream := streamOf(p)
	ins, err := s.Admin.Inspect(ctx, stream, p.Handler)
	if err != nil {
		return tui.HeadDetail{}, err
	}
	var d tui.HeadDetail
	for _, l := range ins.Lanes {
		li := tui.LaneInfo{Stream: l.Stream, Length: l.Length}
		for _, g := range l.Groups {
			if g.Name == p.Handler {
				li.Pending = g.Pending
			}
		}
		d.Lanes = append(d.Lanes, li)
	}
	h, err := s.Admin.Head(ctx, stream, p.Handler)
	var nf *admin.NotFoundError
	if errors.As(err, &nf) {
		return d, nil // caught up: no head
	}
	if err != nil {
		return tui.HeadDetail{}, err
	}
	d.EntryID, d.Stream, d.Attempts, d.Error = h.ID, h.Lane, int(h.Attempts), h.LastError
	if h.Lane != stream {
		d.Lane = 1
	}
	d.EventType, d.EventID, d.Payload = h.Envelope.Type, h.Envelope.ID, string(h.Envelope.Data)
	if h.HaltedSince != nil {
		d.Since = *h.HaltedSince
	}
	return d, nil
}

// DLQs feeds the dashboard's DLQ view.
func (s *Source) DLQs(ctx context.Context) ([]tui.DLQInfo, error) {
	ds, err := s.Admin.DLQs(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]tui.DLQInfo, 0, len(ds))
	for _, d := range ds {
		out = append(out, tui.DLQInfo{Stream: d.Stream, Length: d.Length, OldestID: d.OldestID, NewestID: d.NewestID,
			OldestAge: time.Duration(d.OldestAgeMS) * time.Millisecond})
	}
	return out, nil
}

// Audit feeds the dashboard's audit view: the newest limit actions, newest first.
func (s *Source) Audit(ctx context.Context, limit int) ([]tui.AuditRecord, error) {
	es, err := s.Admin.AuditEntries(ctx, admin.AuditQuery{Limit: limit})
	if err != nil {
		return nil, err
	}
	out := make([]tui.AuditRecord, 0, len(es))
	for _, e := range es {
		out = append(out, tui.AuditRecord{Time: e.Time, User: e.User, Host: e.Host, Command: e.Command, Stream: e.Stream,
			Handler: e.Handler, EntryID: e.EntryID, Outcome: e.Outcome, Detail: e.Detail})
	}
	return out, nil
}

func streamOf(p tui.PartitionRef) string {
	if p.Key == "" {
		return p.Category
	}
	return p.Category + ":" + p.Key
}

func (s *Source) act(ctx context.Context, kind admin.ActionKind, p tui.PartitionRef, expectID string) error {
	_, err := s.Admin.Act(ctx, admin.Action{Kind: kind, Stream: streamOf(p), Handler: p.Handler, ExpectID: expectID,
		Reason: "from seqctl top", Actor: s.Actor})
	return err
}

func (s *Source) Skip(ctx context.Context, p tui.PartitionRef, id string) error {
	return s.act(ctx, admin.ActionSkip, p, id)
}

func (s *Source) MoveToDLQ(ctx context.Context, p tui.PartitionRef, id string) error {
	return s.act(ctx, admin.ActionDLQ, p, id)
}

func (s *Source) Retry(ctx context.Context, p tui.PartitionRef, id string) error {
	return s.act(ctx, admin.ActionRetry, p, id)
}

// pauseInfo is the dashboard's view of a pause record, nil when there is none.
func pauseInfo(p *engine.PauseRecord) *tui.PauseInfo {
	if p == nil {
		return nil
	}
	return &tui.PauseInfo{Reason: p.Reason, By: p.By, Since: p.Since, Until: p.Until}
}

// Pause pauses a partition from 'seqctl top', until it is resumed.
func (s *Source) Pause(ctx context.Context, p tui.PartitionRef, reason string) error {
	_, err := s.Admin.Pause(ctx, admin.PauseRequest{Stream: streamOf(p), Handler: p.Handler, Reason: reason, Actor: s.pauseActor(admin.ActionPause)})
	return err
}

// Resume resumes a partition from 'seqctl top'.
func (s *Source) Resume(ctx context.Context, p tui.PartitionRef) error {
	_, err := s.Admin.Resume(ctx, admin.PauseRequest{Stream: streamOf(p), Handler: p.Handler, Reason: "from seqctl top", Actor: s.pauseActor(admin.ActionResume)})
	return err
}

// pauseActor is the dashboard's actor, recorded with the command of the CLI that does
// the same, so 'seqctl audit' shows every pause alike.
func (s *Source) pauseActor(action string) admin.Actor {
	who := s.Actor
	who.Command = "partitions " + action
	return who
}

// The dashboard's pause and resume keys.
var _ tui.PauseSource = (*Source)(nil)

// Ping tells the dashboard whether Redis answers, so that a refresh that ran out of time
// is shown as slow, not as Redis unreachable.
func (s *Source) Ping(ctx context.Context) error { return s.Admin.Ping(ctx) }
