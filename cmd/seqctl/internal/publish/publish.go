// Package publish is 'seqctl publish': publish events through the domain's router, one
// from the flags or many from a file.
package publish

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/term"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/redisconn"
	"github.com/seqctl/seqctl/internal/ctxwait"
	"github.com/seqctl/seqctl/pkg/config"
	"github.com/seqctl/seqctl/pkg/engine"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// Options are the inputs of 'seqctl publish'.
type Options struct {
	IO *cmdutil.IOStreams
	// ConfigPath is the domain.toml whose router is used (the global --config;
	// "domain.toml" when not given).
	ConfigPath string
	// Redis are the global connection flags (see redisconn.Resolve).
	Redis redisconn.Flags
	// Event is the event type (--event). With a file, it says every line is a payload of
	// this type; without it, every line is an object {"event", "data", "priority"}.
	Event string
	// Data is the JSON payload, or @FILE (@- for stdin) for a JSON Lines file (--data).
	Data string
	// Priority is the lane priority (--priority, default 0).
	Priority int
	// ID is the event id (--id; "" assigns a random one). Single event only.
	ID string
	// Output is the global -o: "json" or "yaml", or text for anything else ("", "table", "wide").
	Output string
	// ProgressTTY says stderr is a terminal: a file publish draws a progress bar there.
	ProgressTTY bool
	// RetryFor is how long an event is published again while Redis does not answer or
	// is loading its data (--retry-for; 0 stops at the first failure).
	RetryFor time.Duration
	// TraceParent and TraceState are the W3C trace context stored with every event
	// published (--traceparent, else $TRACEPARENT and $TRACESTATE).
	TraceParent, TraceState string
}

// publishLong is the long help of 'seqctl publish'.
const publishLong = `Publish one event, or a file of events, the way the engine's publisher does: the
partition key is extracted from the payload and validated, and the event is appended to
its partition stream ({category}:{key}, or the key's backfill lane for a priority below
the lanes threshold) with its discovery-index entry, in one script.

A key that cannot be used (null or empty, longer than 255 bytes, containing ':', equal
to dlq or the backfill suffix, or of the reserved __name__ form) is rejected with the
reason and nothing is written: exit status 2. An unknown event type or a payload that
is not JSON is rejected the same way.

One event: --event NAME --data '{"client_id":"c-1",...}'. It prints the stream and the
entry id (on a pipe: STREAM<TAB>ENTRY_ID<TAB>EVENT_ID; -o json: an object).

A file: --data @events.jsonl (or @- for stdin), one JSON document per line, published
in file order (blank lines are skipped), up to 256 lines (or 1 MiB of payloads) in one
round trip: a batch is sent once full, or as soon as no more input is at hand, so a line
piped in slowly is not held back. The line format depends on --event:

  with --event NAME     each line is the payload of a NAME event
                        {"client_id":"c-1","order_id":"o-1"}
  without --event       each line names its event:
                        {"event":"OrderPlaced","data":{"client_id":"c-1"},"priority":0}
                        ("priority" is optional, --priority is its default;
                        an optional "id" sets the event id)

A bad line (not JSON, unknown event, invalid key) is reported as FILE:LINE: reason on
stderr, nothing is written for it, and publishing continues with the next line; at the
end a summary is printed and the exit status is 2 if any line failed. On a terminal a
progress bar is drawn on stderr. On a pipe each published event prints a row
LINE<TAB>STREAM<TAB>ENTRY_ID<TAB>EVENT_ID; -o json prints one summary object.

While Redis does not answer or is still loading its data (a restart, a failover), the
event (of a file, the batch) is published again, with the same event ids, for up to
--retry-for (15s by default; a line on stderr says so): Redis keeps an event id's first
append, so an attempt that did land is not appended twice. If Redis is still
unavailable after that, or refuses an event (out of memory, say), publishing stops
there with FILE:LINE of the event (exit status 1), and the summary counts the events
appended (of a batch that got no answer, none: some may have landed). A problem waiting
cannot fix (a TLS handshake that fails, a TLS server spoken to in plain text) fails the
first event at once.

Trace context: with --traceparent, or else $TRACEPARENT (and $TRACESTATE) set, as
command-line tracing tools do, every event published carries that W3C trace context to
its handlers (an HTTP handler's traceparent header, an exec handler's TRACEPARENT, a Go
handler's context).`

// publishExamples are the examples of 'seqctl publish'.
const publishExamples = `  # one event (--config, --redis-url and -o are global flags)
  $ seqctl publish --config domain.toml --event OrderPlaced \
      --data '{"order_id":"o-1","client_id":"c-1","total":12}'
  published OrderPlaced 3f0c... to order:c-1 as entry 1738317600000-0

  # a file of OrderPlaced payloads, with the result as JSON
  $ seqctl publish --event OrderPlaced --data @orders.jsonl -o json

  # a file whose lines name their events
  $ seqctl publish --data @events.jsonl`

// NewCmd returns the 'seqctl publish' command; runF, when not nil, runs in place of
// its work with the options the flags gave (tests).
func NewCmd(f *cmdutil.Factory, runF func(*Options) error) *cobra.Command {
	opts := &Options{IO: f.IOStreams}
	cmd := &cobra.Command{
		Use:     "publish --event NAME --data JSON|@FILE [flags]",
		Short:   "Publish events through the domain's router",
		Long:    publishLong,
		Example: publishExamples,
		Args:    cmdutil.NoArgs,
		RunE: cmdutil.RunE(opts, func(cmd *cobra.Command, _ []string) error {
			opts.ConfigPath, opts.Redis, opts.Output = cmdutil.ConfigOrDefault(f.Global.ConfigPath), f.Global.RedisFlags(), f.Global.Output
			if err := cmdutil.CheckFormat(cmd, opts.Output); err != nil {
				return err
			}
			if err := opts.traceFrom(cmd.CommandPath(), os.Getenv); err != nil {
				return err
			}
			return opts.check(cmd.CommandPath())
		}, runF, publishRun),
	}
	fl := cmd.Flags()
	fl.StringVarP(&opts.Event, "event", "e", "", "event type name; with a file, the type of every line")
	fl.StringVarP(&opts.Data, "data", "d", "", "the JSON payload, or @FILE for a JSON Lines file (@- for stdin)")
	fl.IntVar(&opts.Priority, "priority", 0, "lane priority (below the [server.priority_lanes] threshold goes to the backfill lane)")
	fl.StringVar(&opts.ID, "id", "", "event id (default: a random UUID); one event only")
	fl.StringVar(&opts.TraceParent, "traceparent", "", "W3C trace context of the events (default: $TRACEPARENT), e.g. 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	fl.DurationVar(&opts.RetryFor, "retry-for", 15*time.Second, "how long to publish an event again while Redis does not answer or is loading (0: stop at the first failure)")
	if f, ok := f.IOStreams.ErrOut.(*os.File); ok {
		opts.ProgressTTY = term.IsTerminal(int(f.Fd()))
	}
	return cmd
}

func (o *Options) check(command string) error {
	switch {
	case o.Data == "":
		return cmdutil.UsageErrorf(command, "--data is required: a JSON payload, or @FILE for a JSON Lines file")
	case o.Data == "@":
		return cmdutil.UsageErrorf(command, "--data @ needs a file name: @events.jsonl, or @- for stdin")
	case !o.fileMode() && o.Event == "":
		return cmdutil.UsageErrorf(command, "--event is required with a single --data payload")
	case !o.fileMode() && !json.Valid([]byte(o.Data)):
		return cmdutil.UsageErrorf(command, "--data is not valid JSON: %s", jsonError([]byte(o.Data)))
	case o.fileMode() && o.ID != "":
		return cmdutil.UsageErrorf(command, "--id names one event; it cannot be used with a file")
	}
	return nil
}

// traceFrom settles the trace context: --traceparent, else $TRACEPARENT with
// $TRACESTATE. One that is not a W3C traceparent is a usage error, naming where it came
// from.
func (o *Options) traceFrom(command string, getenv func(string) string) error {
	from := "--traceparent"
	if o.TraceParent == "" {
		o.TraceParent, o.TraceState, from = getenv("TRACEPARENT"), getenv("TRACESTATE"), "$TRACEPARENT"
	}
	if o.TraceParent == "" {
		o.TraceState = ""
		return nil
	}
	if err := keyspace.ValidTraceParent(o.TraceParent); err != nil {
		return cmdutil.UsageErrorf(command, "%s: %v (or unset it to publish without trace context)", from, err)
	}
	if !remoteSpan(o.TraceParent, o.TraceState).IsValid() {
		return cmdutil.UsageErrorf(command, "%s: traceparent %q sets trace flags W3C trace context does not define (version 00 has 01, sampled, and 02, random): its events would reach their handlers without it", from, o.TraceParent)
	}
	return nil
}

// remoteSpan is the span context a W3C trace context names, as the engine reads it from
// an entry (invalid when it names none): what publish gives Broker.Publish in its ctx.
func remoteSpan(traceParent, traceState string) trace.SpanContext {
	ev := engine.Event{TraceParent: traceParent, TraceState: traceState}
	return trace.SpanContextFromContext(engine.ContextWithEventTrace(context.Background(), ev))
}

func (o *Options) fileMode() bool { return strings.HasPrefix(o.Data, "@") }

// jsonError describes why b is not JSON.
func jsonError(b []byte) string {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err.Error()
	}
	return "trailing data"
}

// publishResult is what a single publish prints with -o json.
type publishResult struct {
	EventID  string `json:"event_id"`
	Type     string `json:"type"`
	Category string `json:"category"`
	Key      string `json:"key"`
	Stream   string `json:"stream"`
	EntryID  string `json:"entry_id"`
}

// publisher publishes events for the command through the engine's publish
// (RedisBroker.Publish), the one writer of the stream entry: it only adds the checks that
// speak the user's terms, and the retry while Redis is unavailable.
type publisher struct {
	dom    *engine.Domain
	broker *engine.RedisBroker
	redis  *redisconn.Conn // to explain a connection failure; nil in tests
	// retryFor bounds how long one event is published again while Redis is unavailable;
	// retrying is said once on errOut (before it, clear clears a progress bar).
	retryFor time.Duration
	errOut   io.Writer
	clear    func()
	retried  bool
	reached  bool // an event was published: Redis and the connection settings work
	// span is the W3C trace context of every event (Options.TraceParent), as the
	// remote parent span context Broker.Publish stores; invalid without one.
	span trace.SpanContext
}

// check routes an event without touching Redis, as the publish will: its errors speak of
// the user's event, payload and fields, never of the engine's types.
func (p *publisher) check(eventType string, data []byte, priority int) error {
	if !json.Valid(data) {
		return fmt.Errorf("the payload is not valid JSON: %s", jsonError(data))
	}
	if kind := jsonKind(data); kind != "object" {
		return fmt.Errorf("the payload is a JSON %s; an event payload is a JSON object, e.g. {\"client_id\": \"c-1\"}", kind)
	}
	_, err := p.dom.Route(eventType, data, priority)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, engine.ErrUnknownEvent):
		return unknownEventError(p.dom, eventType)
	}
	return errors.New(strings.TrimPrefix(err.Error(), "engine: "))
}

// unknownEventError names the declared events, and the closest one when the name looks
// like a typo.
func unknownEventError(dom *engine.Domain, name string) error {
	var names []string
	for _, e := range dom.Events {
		names = append(names, e.Name)
	}
	slices.Sort(names)
	msg := fmt.Sprintf("unknown event type %q", name)
	if s := closest(name, names); s != "" {
		msg += fmt.Sprintf(": did you mean %q?", s)
	}
	if len(names) > 0 {
		msg += fmt.Sprintf(" (declared events: %s)", strings.Join(names, ", "))
	} else {
		msg += " (the domain declares no events)"
	}
	return errors.New(msg)
}

// closest returns the candidate nearest to s by edit distance (letters compared without
// case), "" when none is near enough to be a typo: at most a third of its length away.
func closest(s string, candidates []string) string {
	best, bestD := "", len(s)/3+1
	for _, c := range candidates {
		if d := editDistance(strings.ToLower(s), strings.ToLower(c)); d < bestD || (d == 0 && c != s) {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// jsonKind names the kind of a valid JSON value: object, array, string, number, boolean
// or null.
func jsonKind(data []byte) string {
	t := bytes.TrimSpace(data)
	switch {
	case len(t) == 0:
		return "nothing"
	case t[0] == '{':
		return "object"
	case t[0] == '[':
		return "array"
	case t[0] == '"':
		return "string"
	case t[0] == 't', t[0] == 'f':
		return "boolean"
	case t[0] == 'n':
		return "null"
	}
	return "number"
}

// publish publishes one event that check accepted, with RedisBroker.Publish (again while
// Redis is unavailable, see retry, with the same event id). The replicas are waited for
// once, by the caller (awaitReplicas).
func (p *publisher) publish(ctx context.Context, eventType, id string, data []byte, priority int) (publishResult, error) {
	opt := engine.PublishOptions{ID: id, Priority: priority, SkipReplicaWait: true}
	if opt.ID == "" {
		opt.ID = engine.NewEventID()
	}
	ctx = p.traced(ctx)
	var pub engine.Published
	err := p.retry(ctx, func() (err error) {
		pub, err = p.broker.Publish(ctx, p.dom, eventType, data, opt)
		return err
	})
	if err != nil {
		return publishResult{}, err
	}
	return publishResult{EventID: pub.EventID, Type: eventType, Category: pub.Category, Key: pub.Key, Stream: pub.Stream, EntryID: pub.EntryID}, nil
}

// publishMany publishes events that check accepted in one round trip, with
// RedisBroker.PublishMany (again while Redis is unavailable, see retry). An event without
// an id is given one first, in events, so that sending the batch again appends nothing
// twice. It returns what the last attempt returned: an event appended (then or before) has
// its EntryID, and an error is the engine's *BatchError. The replicas are waited for once,
// by the caller (awaitReplicas).
func (p *publisher) publishMany(ctx context.Context, events []engine.BatchEvent) ([]engine.Published, error) {
	for i := range events {
		if events[i].ID == "" {
			events[i].ID = engine.NewEventID()
		}
	}
	ctx = p.traced(ctx)
	var pubs []engine.Published
	err := p.retry(ctx, func() (err error) {
		pubs, err = p.broker.PublishMany(ctx, p.dom, events, engine.BatchOptions{SkipReplicaWait: true})
		return err
	})
	return pubs, err
}

// traced is ctx carrying the W3C trace context of the command (p.span) as its remote span
// context, which the broker stores with every event; ctx itself without one.
func (p *publisher) traced(ctx context.Context) context.Context {
	if !p.span.IsValid() {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, p.span)
}

// retry runs send, a publish of events with their ids fixed, and runs it again while
// Redis is unavailable (redisUnavailable), backing off from 100 ms to 2 s, for up to
// p.retryFor: Redis keeps an event id's first append, so an attempt that did land is not
// appended twice. The first time it waits it says so on p.errOut. It returns send's last
// error, or ctx's end while it waited.
func (p *publisher) retry(ctx context.Context, send func() error) error {
	err := send()
	for wait, until := 100*time.Millisecond, time.Now().Add(p.retryFor); err != nil && redisUnavailable(err, p.reached) && time.Now().Before(until); wait = min(2*wait, 2*time.Second) {
		if !p.retried && p.errOut != nil {
			p.retried = true
			if p.clear != nil {
				p.clear()
			}
			fmt.Fprintf(p.errOut, "seqctl: Redis is not available (%v); publishing again with the same event id for up to %s (--retry-for)\n", err, p.retryFor)
		}
		if !ctxwait.Sleep(ctx, min(wait, time.Until(until))) {
			return err
		}
		err = send()
	}
	if err == nil {
		p.reached = true
	}
	return err
}

// redisUnavailable reports whether a publish failed because Redis did not answer or
// was not ready to (loading its data after a restart, a cluster or failover not settled):
// a state that passes (engine.Transient), unlike a refusal (out of memory, no
// permission). Before anything was published (reached false) only a refused connection
// counts among the network failures: a failed TLS handshake, a TLS server spoken to in
// plain text or a wrong address would not pass, and fail at once.
func redisUnavailable(err error, reached bool) bool {
	if !engine.Transient(err) {
		return false
	}
	var re redis.Error
	return reached || errors.As(err, &re) || errors.Is(err, syscall.ECONNREFUSED)
}

// newPublisher loads the config and connects the broker (lazily: go-redis dials on the
// first command).
func newPublisher(opts *Options) (*publisher, func(), error) {
	cfg, err := cmdutil.LoadConfigFile(opts.ConfigPath)
	if err != nil {
		return nil, nil, err
	}
	if !cfg.Broker.IsRedis() {
		return nil, nil, &config.Error{File: cfg.File, Problems: []config.Problem{{Path: "broker.kind", Message: fmt.Sprintf(
			"seqctl publish needs the redis broker, not %q: the inline broker lives inside one Go process", cfg.Broker.Kind)}}}
	}
	conn, err := redisconn.Resolve(opts.Redis, cfg, os.Getenv)
	if err != nil {
		return nil, nil, err
	}
	redisconn.WarnInsecureTLS(conn.TLSConfig(), func(msg string) { fmt.Fprintln(opts.IO.ErrOut, "seqctl: warning: "+msg) })
	dom, err := cfg.InitDomain()
	if err != nil {
		return nil, nil, err
	}
	redisconn.RouteRedisLogs(nil)
	rdb := conn.NewClient()
	broker := engine.NewRedisBroker(rdb).WithReplicas(cfg.Broker.MinReplicas, cfg.Broker.ReplicaTimeout)
	return &publisher{dom: dom, broker: broker, redis: conn, retryFor: opts.RetryFor, errOut: opts.IO.ErrOut,
			span: remoteSpan(opts.TraceParent, opts.TraceState)},
		func() { _ = rdb.Close() }, nil
}

func publishRun(ctx context.Context, opts *Options) error {
	ctx = cmdutil.OrBackground(ctx)
	p, closeFn, err := newPublisher(opts)
	if err != nil {
		return err
	}
	defer closeFn()
	err = publishWith(ctx, opts, p)
	if p.redis != nil {
		if msg := redisconn.TLSProblem(err, p.redis.Where()); msg != "" {
			return errors.New(msg)
		}
		if msg := redisconn.ClosedConnProblem(err, p.redis); msg != "" {
			return errors.New(msg)
		}
		if msg := redisconn.NotClusterProblem(err, p.redis); msg != "" {
			return errors.New(msg)
		}
	}
	return err
}

// publishWith publishes what opts say through p.
func publishWith(ctx context.Context, opts *Options, p *publisher) error {
	if opts.fileMode() {
		return publishFile(ctx, opts, p)
	}
	data := []byte(opts.Data)
	if err := p.check(opts.Event, data, opts.Priority); err != nil {
		return &cmdutil.ExitError{Code: cmdutil.ExitUsage, Err: err}
	}
	res, err := p.publish(ctx, opts.Event, opts.ID, data, opts.Priority)
	if err != nil {
		return fmt.Errorf("publish %s: %w", opts.Event, err)
	}
	// The event is on the primary now: say where, then whether the replicas have it.
	out := opts.IO.Out
	switch {
	case cmdutil.Structured(opts.Output):
		err = cmdutil.WriteData(out, opts.Output, res)
	case opts.IO.IsTerminal:
		_, err = fmt.Fprintf(out, "%s published %s %s to %s as entry %s\n",
			opts.IO.Green("✓"), res.Type, opts.IO.Gray(res.EventID), opts.IO.Bold(res.Stream), res.EntryID)
	default:
		_, err = fmt.Fprintf(out, "%s\t%s\t%s\n", res.Stream, res.EntryID, res.EventID)
	}
	if err != nil {
		return err
	}
	return p.awaitReplicas(ctx, 1)
}

// awaitReplicas waits once, after n events were published, for the replicas that
// [broker] min_replicas asks for (nothing when it is 0). A shortfall is an error (exit 1)
// that says the events are on the primary but a failover may lose them.
func (p *publisher) awaitReplicas(ctx context.Context, n int) error {
	if n == 0 {
		return nil
	}
	what := "publish"
	if n > 1 {
		what = fmt.Sprintf("publish of %d events", n)
	}
	return p.broker.AwaitReplicas(ctx, what)
}
