// Package audit is 'seqctl audit': the operator actions recorded in Redis, filtered by
// time, stream and outcome.
package audit

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/pkg/admin"
)

// Options are the inputs of 'seqctl audit'.
type Options struct {
	cmdutil.OpsOptions
	// Since keeps the actions of the last Since (0: all of them).
	Since time.Duration
	// Limit keeps the newest Limit actions, newest first (0: all, oldest first).
	Limit int
	// Stream and Outcome keep the actions on this stream, with this outcome.
	Stream  string
	Outcome string
}

// auditOutcomes are the values of audit --outcome.
var auditOutcomes = []string{admin.OutcomeOK, admin.OutcomeHeadMoved, admin.OutcomeNotHalted, admin.OutcomeNotPending,
	admin.OutcomeEntryGone, admin.OutcomeNotFound, admin.OutcomeRefused, admin.OutcomeDeclined, admin.OutcomeFailed,
	admin.OutcomeNotReplicated, admin.OutcomeNotRegistered, admin.OutcomeDeclared, admin.OutcomeLiveLease, admin.OutcomeReadMoved,
	admin.OutcomeHalted, admin.OutcomeNotPaused, admin.OutcomeStopped}

// NewCmd returns the 'seqctl audit' command; runF, when not nil, runs in place of
// its work with the options the flags gave (tests).
func NewCmd(f *cmdutil.Factory, runF func(*Options) error) *cobra.Command {
	opts := &Options{OpsOptions: f.OpsOptions()}
	var since string
	cmd := &cobra.Command{
		Use:   "audit [--since DURATION] [--limit N] [--stream S] [--outcome O]",
		Short: "List every operator action: time, user, host, command, stream, handler, entry, outcome",
		Long: `List the operator actions recorded in Redis (the __seqctl__:audit stream, capped at
about 100,000 entries), oldest first, or the newest N first with --limit N: when (Redis
time), the user and host, the command (head skip, head dlq, head retry, dlq replay, dlq
purge, groups remove, partitions pause|resume, limits set|clear), the stream (the
category for groups remove; "value V" for limits set|clear, whose detail holds the old
and new caps), the handler, the entry id and the outcome. Refused and failed attempts are recorded too:

  ok           done
  head_moved   the head was not the expected entry; nothing changed
  not_halted   the head was not halted (no --force); nothing changed
  not_pending  the head was not delivered yet; nothing changed
  entry_gone   the entry was trimmed; nothing changed
  not_found    no such partition, handler or DLQ entry (limits clear: no override)
  refused      no terminal to confirm on and no --yes; nothing changed
  declined     the operator answered no; nothing changed
  failed       another error (the detail says which)
  not_replicated  done on the primary, but fewer replicas than min_replicas acknowledged
               it; a failover may lose it

and for groups remove:

  not_registered  the group was not registered for the category; nothing changed
  declared        the --config domain still declares the group; nothing changed
  live_lease      the group held a live lease (it was running); nothing changed
  read_moved      the group had read entries since; nothing changed

--since takes a duration such as 90m, 12h or 7d (default: everything). --stream keeps
the actions on one partition (its DLQ included) or, for groups remove, one category;
--outcome those with one outcome. -o wide adds the reason and the detail.`,
		Example: `  # the last day
  $ seqctl audit --since 24h

  # the ten newest refusals on one partition
  $ seqctl audit --limit 10 --stream order:client-123 --outcome head_moved

  # everything, as JSON
  $ seqctl audit -o json`,
		Args: cmdutil.NoArgs,
		RunE: cmdutil.OpsRunE(f, opts, func(cmd *cobra.Command, _ []string) error {
			if since != "" {
				d, err := parseSince(since)
				if err != nil {
					return cmdutil.UsageErrorf(cmd.CommandPath(), "invalid value %q for --since: %v", since, err)
				}
				opts.Since = d
			}
			if opts.Limit < 0 {
				return cmdutil.UsageErrorf(cmd.CommandPath(), "invalid value %d for --limit: want a positive number of actions (0 for all)", opts.Limit)
			}
			if opts.Outcome != "" && !slices.Contains(auditOutcomes, opts.Outcome) {
				return cmdutil.UsageErrorf(cmd.CommandPath(), "invalid value %q for --outcome: want one of %s", opts.Outcome, strings.Join(auditOutcomes, ", "))
			}
			return nil
		}, runF, auditRun),
	}
	fl := cmd.Flags()
	fl.StringVar(&since, "since", "", "only the actions of the last DURATION (e.g. 90m, 12h, 7d)")
	fl.IntVarP(&opts.Limit, "limit", "n", 0, "only the newest N actions, newest first")
	fl.StringVar(&opts.Stream, "stream", "", "only the actions on this partition ({category}:{key}) or its DLQ")
	fl.StringVar(&opts.Outcome, "outcome", "", "only the actions with this outcome: "+strings.Join(auditOutcomes, ", "))
	_ = cmd.RegisterFlagCompletionFunc("outcome", cobra.FixedCompletions(auditOutcomes, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("stream", cmdutil.CompleteStreams(f))
	return cmd
}

// auditTarget is the STREAM cell of an action: its stream, or the limit value a limits
// command acted on ("value acme").
func auditTarget(e admin.AuditEntry) string {
	if e.Stream == "" && e.Value != "" {
		return "value " + e.Value
	}
	return cmdutil.OrDash(e.Stream)
}

// parseSince parses a positive Go duration, or a number of days ("7d").
func parseSince(s string) (time.Duration, error) {
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil {
			return 0, fmt.Errorf("want a duration such as 90m, 12h or 7d")
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("want a duration such as 90m, 12h or 7d")
		}
	}
	if d <= 0 {
		return 0, fmt.Errorf("the duration must be positive")
	}
	return d, nil
}

func auditRun(ctx context.Context, adm cmdutil.Admin, opts *Options) error {
	entries, err := adm.AuditEntries(ctx, admin.AuditQuery{Since: opts.Since, Limit: opts.Limit, Stream: opts.Stream, Outcome: opts.Outcome})
	if err != nil {
		return cmdutil.ExitFor(err)
	}
	ios := opts.IO
	if done, err := cmdutil.WriteList(ios, opts.Output, entries, "No operator actions recorded."); done {
		return err
	}
	header := []string{"TIME", "OS USER", "REDIS USER", "HOST", "COMMAND", "STREAM", "HANDLER", "ENTRY"}
	wide := opts.Output == "wide"
	if wide {
		header = append(header, "REASON", "DETAIL")
	}
	t := cmdutil.NewTable(ios, opts.Layout(), append(header, "OUTCOME")...)
	for _, e := range entries {
		row := []string{cmdutil.FmtTime(&e.Time), cmdutil.OrDash(e.User), cmdutil.OrDash(e.RedisUser), cmdutil.OrDash(e.Host), cmdutil.OrDash(e.Command), auditTarget(e), cmdutil.OrDash(e.Handler), cmdutil.OrDash(e.EntryID)}
		if wide {
			row = append(row, cmdutil.OrDash(e.Reason), cmdutil.FirstLine(cmdutil.OrDash(e.Detail), 80))
		}
		outcome := ios.Red(e.Outcome)
		if e.Outcome == admin.OutcomeOK {
			outcome = ios.Green(e.Outcome)
		}
		t.AddRow(append(row, outcome)...)
	}
	return t.Render(ios.Out)
}
