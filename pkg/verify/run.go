package verify

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/pkg/engine"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// Options configure Run. Zero values take the defaults.
type Options struct {
	// Client is the Redis to verify; the caller owns it.
	Client redis.UniversalClient
	// NewClient opens a client to the same Redis for one engine instance (each instance
	// has its own, closed when the instance stops), whose connections take name as their
	// client name (CLIENT SETNAME), so that a fault can drop them (Control.Drop).
	NewClient func(name string) redis.UniversalClient
	// Keys is how many partition keys the workload has (default 100), Events how many
	// events each key gets (default 20).
	Keys, Events int
	// Rate is how many events a second are published while the engines run (0: every
	// event is published before they start, a backlog).
	Rate int
	// Instances is how many engine instances run the handler side (default 2).
	Instances int
	// MaxUnacked is the engines' max_unacked (default 1, the strict mode).
	MaxUnacked int
	// BatchMax above 1 gives the handler batches of up to that many events of a key (a
	// BatchFunc).
	BatchMax int
	// Tenants above 0 puts the keys in that many tenants, and the handler under a limit
	// key by tenant with a concurrency cap of TenantCap (default 2).
	Tenants, TenantCap int
	// Poison above 0 gives that many keys (the first ones) a poison event, one that always
	// fails, in the middle of their sequence: each of those keys must halt on it after
	// its retries and apply nothing after it (the events after it wait on the halt).
	Poison int
	// Timeout bounds the wait for every event to be applied, from the last publish
	// (default 2 minutes).
	Timeout time.Duration
	// Replicas above 0 makes each publish wait for that many replicas (WithReplicas, one
	// Redis node only), so that a failover loses no event the publisher was told about; a
	// round that falls short is published again (its events' ids make that safe).
	Replicas int
	// Keep leaves the workload's keys in Redis after the run (default: deleted).
	Keep bool
	// Handler, when set, is called by the recording handler before it records a run: a
	// test plants faults with it. It returns the run as it is recorded (and an error for
	// a failed run).
	Handler func(ctx context.Context, a Application) (Application, error)
	// Faults, when set, runs beside the workload from the engines' start until every
	// event is applied (its context then ends): it injects faults through the Control.
	Faults func(ctx context.Context, c *Control)
	// Logger receives the engines' logs (default: discarded).
	Logger *slog.Logger
	// RunID names the workload's category and handler (default: a random one); the
	// category is "verify_" + RunID, never one of the user's.
	RunID string
}

// Result is the outcome of Run: the report, the category it used, the applications
// recorded.
type Result struct {
	Report   Report
	Category string
	Apps     []Application
	// CleanupErr says why the workload's keys (every key whose name holds the run id)
	// could not all be deleted; nil when they were, or with Keep.
	CleanupErr error
}

// payload is a workload event's payload.
type payload struct {
	Key    string `json:"key"`
	Seq    int    `json:"seq"`
	Tenant string `json:"tenant,omitempty"`
	Poison bool   `json:"poison,omitempty"`
}

// poisonAt is the event of a poisoned key that is poison: the middle of its sequence.
func poisonAt(events int) int { return events/2 + 1 }

// Control lets Faults act on the engine instances of a run.
type Control struct {
	o      *Options
	d      *engine.Domain
	ctx    context.Context    // the run's: the instances stop when it ends
	cancel context.CancelFunc // ends ctx

	mu      sync.Mutex
	engines []*engine.Engine        // guarded by mu; nil for an instance stopped
	clients []redis.UniversalClient // guarded by mu
	names   []string                // each instance's client name; guarded by mu
	starts  int                     // instances started in all; guarded by mu
	wg      sync.WaitGroup
}

// Name returns the client name of instance i's current incarnation (what NewClient was
// given), "" before it first started.
func (c *Control) Name(i int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.names[i]
}

// Instances returns how many instance slots the run has.
func (c *Control) Instances() int { return len(c.engines) }

// Start starts instance i (a new incarnation with a new id when it ran before), unless it
// runs.
func (c *Control) Start(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.engines[i] != nil {
		return nil
	}
	c.starts++
	id := fmt.Sprintf("verify-%s-%d-%d", c.o.RunID, i, c.starts)
	cl := c.o.NewClient(id)
	e, err := engine.New(engine.EngineConfig{Domain: c.d, Client: cl,
		InstanceID: id,
		MaxUnacked: c.o.MaxUnacked, Logger: c.o.Logger, ShutdownTimeout: 10 * time.Second})
	if err != nil {
		_ = cl.Close()
		return err
	}
	if err := e.Start(c.ctx); err != nil {
		_ = cl.Close()
		return err
	}
	c.engines[i], c.clients[i], c.names[i] = e, cl, id
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		_ = e.Run(c.ctx)
	}()
	return nil
}

// Stop stops instance i abruptly: a shutdown whose deadline has passed, so its handlers
// in flight are cancelled, as a process given a short grace period; its partitions move
// to the others.
func (c *Control) Stop(i int) {
	if e, cl := c.take(i); e != nil {
		shutdownNow(e)
		_ = cl.Close()
	}
}

// Crash stops instance i as a crashed process stops, as far as Redis can tell: its
// connections are closed first, so it acknowledges nothing more and releases no lease;
// its session expires after the lease TTL and the others take its partitions over then,
// running again what it had handled and not acknowledged.
func (c *Control) Crash(i int) {
	if e, cl := c.take(i); e != nil {
		_ = cl.Close()
		shutdownNow(e)
	}
}

// take removes instance i from the run and returns its engine and client (nil when it
// is not running).
func (c *Control) take(i int) (*engine.Engine, redis.UniversalClient) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, cl := c.engines[i], c.clients[i]
	c.engines[i], c.clients[i] = nil, nil
	return e, cl
}

// shutdownNow shuts e down with a deadline that passes at once: its handlers in flight
// are cancelled.
func shutdownNow(e *engine.Engine) {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_ = e.Shutdown(ctx)
}

// Drop closes, on the server side (CLIENT KILL), every connection of instance i, as a
// network fault or a proxy restart would: its client dials again, and what was in
// flight on them got no reply. It returns how many it closed.
func (c *Control) Drop(ctx context.Context, i int) (int, error) {
	c.mu.Lock()
	name := c.names[i]
	running := c.engines[i] != nil
	c.mu.Unlock()
	if !running {
		return 0, nil
	}
	var mu sync.Mutex
	killed := 0
	err := onMasters(ctx, c.o.Client, func(ctx context.Context, n redis.UniversalClient) error {
		list, err := n.ClientList(ctx).Result()
		if err != nil {
			return err
		}
		for _, line := range strings.Split(list, "\n") {
			var id string
			named := false
			for _, f := range strings.Fields(line) {
				if v, ok := strings.CutPrefix(f, "id="); ok {
					id = v
				}
				if f == "name="+name || f == "name="+engine.SessionConnName(name) {
					named = true
				}
			}
			if named && id != "" {
				err := n.Do(ctx, "CLIENT", "KILL", "ID", id).Err()
				if err != nil && !strings.Contains(err.Error(), "No such client") {
					return err
				}
				if err == nil {
					mu.Lock()
					killed++
					mu.Unlock()
				}
			}
		}
		return nil
	})
	return killed, err
}

// stopAll ends the run's context, so that every instance stops gracefully, and waits for
// them.
func (c *Control) stopAll() {
	c.cancel()
	c.wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, cl := range c.clients {
		if cl != nil {
			_ = cl.Close()
		}
		c.engines[i], c.clients[i] = nil, nil
	}
}

// keyName and tenantOf name the workload's keys and tenants.
func keyName(k int) string { return fmt.Sprintf("k%05d", k) }

func tenantOf(k, tenants int) string {
	if tenants <= 0 {
		return ""
	}
	return fmt.Sprintf("t%03d", k%tenants)
}

// Run publishes a checkable workload into a category of its own, runs engine instances
// whose handler records every application, waits until every event is applied (or the
// timeout), stops the instances, deletes the workload's keys (unless Keep), and checks
// the record.
func Run(ctx context.Context, o Options) (res Result, err error) {
	if o.Client == nil || o.NewClient == nil {
		return Result{}, errors.New("verify: a Redis client and NewClient are required")
	}
	o.defaults()
	res.Category = "verify_" + o.RunID
	rec := newRecorder(o)
	d, h := o.domain(res.Category, rec)
	pub := &publisher{o: &o, d: d, broker: engine.NewRedisBroker(o.Client)}
	if o.Replicas > 0 {
		pub.broker = pub.broker.WithReplicas(o.Replicas, 2*time.Second)
	}
	if err := d.Init(pub.broker); err != nil {
		return res, err
	}
	if !o.Keep {
		defer func() {
			cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res.CleanupErr = deleteKeys(cctx, o.Client, o.RunID)
		}()
	}
	if o.Rate <= 0 {
		if err := pub.publish(ctx); err != nil {
			return res, err
		}
	}

	runCtx, stop := context.WithCancel(ctx)
	c := &Control{o: &o, d: d, ctx: runCtx, cancel: stop, engines: make([]*engine.Engine, o.Instances), clients: make([]redis.UniversalClient, o.Instances), names: make([]string, o.Instances)}
	defer c.stopAll()
	for i := range o.Instances {
		if err := c.Start(i); err != nil {
			return res, err
		}
	}
	faultCtx, endFaults := context.WithCancel(runCtx)
	var faults sync.WaitGroup
	if o.Faults != nil {
		faults.Add(1)
		go func() {
			defer faults.Done()
			o.Faults(faultCtx, c)
		}()
	}
	defer func() { endFaults(); faults.Wait() }() // before the instances stop
	if o.Rate > 0 {
		if err := pub.publish(ctx); err != nil {
			return res, err
		}
	}
	timer := time.NewTimer(o.Timeout)
	defer timer.Stop()
	select {
	case <-rec.all:
	case <-timer.C:
	case <-ctx.Done():
	}
	endFaults()
	faults.Wait()
	halts, err := waitHalts(ctx, o.Client, res.Category, h.Name, o.Keys, min(o.Poison, o.Keys))
	c.stopAll()
	if err != nil {
		return res, fmt.Errorf("verify: read the halts: %w", err)
	}
	res.Apps = rec.applications()
	res.Report = Check(o.workload(), res.Apps, halts)
	return res, ctx.Err()
}

// domain declares the workload's domain: one event type on category, one handler of the
// recorder's (a BatchFunc with BatchMax above 1), under a limit key by tenant with Tenants.
func (o *Options) domain(category string, rec *recorder) (*engine.Domain, engine.Handler) {
	h := engine.Handler{Name: "Verifier_" + o.RunID, Kind: engine.EventHandlerKind, PartOf: category,
		Handles: []string{"Checked"}, SequentialBy: "key", MaxRetries: 2, RetryDelay: 50 * time.Millisecond}
	if o.BatchMax > 1 {
		h.BatchFunc, h.BatchMax = rec.batch, o.BatchMax
	} else {
		h.Func = rec.one
	}
	fields := []string{"key"}
	if o.Tenants > 0 {
		h.Limit = engine.HandlerLimit{By: "tenant", Concurrency: o.TenantCap}
		fields = append(fields, "tenant")
	}
	d := engine.NewDomain("verify_" + o.RunID).
		AddEvent(engine.EventType{Name: "Checked", Category: category, Fields: fields}).
		AddHandler(h)
	return d, h
}

// workload is what the options publish and what the promises allow them.
func (o *Options) workload() Workload {
	w := Workload{Events: map[string]int{}, ReRunBound: o.MaxUnacked - 1 + max(o.BatchMax, 1), Poison: map[string]int{}}
	for k := range min(o.Poison, o.Keys) {
		w.Poison[keyName(k)] = poisonAt(o.Events)
	}
	for k := range o.Keys {
		w.Events[keyName(k)] = o.Events
	}
	if o.Tenants > 0 {
		w.Caps = map[string]int{}
		for t := range o.Tenants {
			w.Caps[tenantOf(t, o.Tenants)] = o.TenantCap
		}
	}
	return w
}

// publisher publishes the workload in rounds: each round the next event of every key, so
// every key moves along.
type publisher struct {
	o      *Options
	d      *engine.Domain
	broker *engine.RedisBroker
}

// publish publishes every round: at once without a rate, else one round each
// Keys/Rate seconds.
func (p *publisher) publish(ctx context.Context) error {
	var tick <-chan time.Time
	if p.o.Rate > 0 {
		t := time.NewTicker(time.Duration(float64(time.Second) * float64(p.o.Keys) / float64(p.o.Rate)))
		defer t.Stop()
		tick = t.C
	}
	for seq := 1; seq <= p.o.Events && ctx.Err() == nil; seq++ {
		if err := p.round(ctx, seq); err != nil {
			return fmt.Errorf("verify: publish of the workload: %w", err)
		}
		if tick != nil && seq < p.o.Events {
			<-tick
		}
	}
	return nil
}

// round publishes event seq of every key; while Redis is failing over or resharding
// (or short of replicas) it sends the same events again: their ids make a second
// append of any that a first try made impossible.
func (p *publisher) round(ctx context.Context, seq int) error {
	o := p.o
	batch := make([]engine.BatchEvent, 0, o.Keys)
	for k := range o.Keys {
		b, _ := json.Marshal(payload{Key: keyName(k), Seq: seq, Tenant: tenantOf(k, o.Tenants), Poison: k < o.Poison && seq == poisonAt(o.Events)})
		batch = append(batch, engine.BatchEvent{Type: "Checked", Data: b, ID: fmt.Sprintf("%s-%s-%d", o.RunID, keyName(k), seq)})
	}
	for {
		_, err := p.broker.PublishMany(ctx, p.d, batch, engine.BatchOptions{})
		var short *engine.ReplicaShortfallError
		if err == nil || ctx.Err() != nil || !(engine.Transient(err) || errors.As(err, &short)) {
			return err
		}
		o.Logger.Warn("verify: publish failed; sending the round again", "seq", seq, "err", err)
		time.Sleep(200 * time.Millisecond)
	}
}

// waitHalts reads the halts of the workload's keys until want of them are halted (the
// poisoned keys halt after their retries), for at most 30 s.
func waitHalts(ctx context.Context, c redis.UniversalClient, category, group string, keys, want int) ([]Halt, error) {
	halts, err := readHalts(ctx, c, category, group, keys)
	for deadline := time.Now().Add(30 * time.Second); err == nil && len(halts) < want && time.Now().Before(deadline) && ctx.Err() == nil; {
		time.Sleep(200 * time.Millisecond)
		halts, err = readHalts(ctx, c, category, group, keys)
	}
	return halts, err
}

func (o *Options) defaults() {
	if o.Keys <= 0 {
		o.Keys = 100
	}
	if o.Events <= 0 {
		o.Events = 20
	}
	if o.Instances <= 0 {
		o.Instances = 2
	}
	if o.MaxUnacked <= 0 {
		o.MaxUnacked = 1
	}
	if o.Tenants > 0 && o.TenantCap <= 0 {
		o.TenantCap = 2
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.RunID == "" {
		o.RunID = fmt.Sprintf("%d", time.Now().UnixNano())
	}
}

// recorder is the handler side: it records every run.
type recorder struct {
	o       Options
	total   int
	batches atomic.Int64 // the last batch number given

	mu      sync.Mutex
	apps    []Application    // guarded by mu
	applied map[payload]bool // events applied at least once; guarded by mu
	all     chan struct{}    // closed once every event is applied
}

// newRecorder expects every event applied, but for the events of a poisoned key from its
// poison event on.
func newRecorder(o Options) *recorder {
	total := o.Keys*o.Events - min(o.Poison, o.Keys)*(o.Events-poisonAt(o.Events)+1)
	return &recorder{o: o, total: total, applied: map[payload]bool{}, all: make(chan struct{})}
}

// run runs one event: the planted handler's answer, if any, and the run as recorded.
func (r *recorder) run(ctx context.Context, ev engine.Event) (Application, error) {
	var p payload
	if err := json.Unmarshal(ev.Data, &p); err != nil {
		return Application{}, fmt.Errorf("verify: not a workload event: %w", err)
	}
	d, _ := engine.DeliveryFrom(ctx)
	a := Application{Key: p.Key, Seq: p.Seq, Gen: d.Generation, Attempt: d.Attempt, Limit: p.Tenant, Start: time.Now(), PublishedAt: ev.PublishedAt}
	var err error
	if p.Poison {
		err = fmt.Errorf("verify: event %d of %s is poison: it always fails", p.Seq, p.Key)
	}
	if r.o.Handler != nil {
		var herr error
		a, herr = r.o.Handler(ctx, a)
		err = cmp.Or(err, herr)
	}
	a.End = time.Now()
	return a, err
}

// record records runs; failed says the handler call that made them failed (a batch
// fails as a whole: none of its events counts as applied, and all run again).
func (r *recorder) record(apps []Application, failed bool) {
	r.mu.Lock()
	done := false
	for _, a := range apps {
		a.Failed = failed
		r.apps = append(r.apps, a)
		if !failed {
			k := payload{Key: a.Key, Seq: a.Seq}
			if !r.applied[k] {
				r.applied[k] = true
				done = len(r.applied) == r.total
			}
		}
	}
	r.mu.Unlock()
	if done {
		close(r.all)
	}
}

// one is the handler of single events.
func (r *recorder) one(ctx context.Context, ev engine.Event) error {
	a, err := r.run(ctx, ev)
	if a.Key != "" {
		r.record([]Application{a}, err != nil)
	}
	return err
}

// batch is the handler of batches: the events of a run, applied in order.
func (r *recorder) batch(ctx context.Context, evs []engine.Event) error {
	apps := make([]Application, 0, len(evs))
	id := r.batches.Add(1)
	var err error
	for _, ev := range evs {
		var a Application
		if a, err = r.run(ctx, ev); a.Key != "" {
			a.Batch = id
			apps = append(apps, a)
		}
		if err != nil {
			break
		}
	}
	r.record(apps, err != nil)
	return err
}

// applications returns a copy of the record.
func (r *recorder) applications() []Application {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Application(nil), r.apps...)
}

// readHalts reads the halt record of each key of the workload and returns the halted
// ones, each with the number of the event at its head.
func readHalts(ctx context.Context, c redis.UniversalClient, category, group string, keys int) ([]Halt, error) {
	ks := keyspace.For(c)
	pipe := c.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, keys)
	for k := range keys {
		cmds[k] = pipe.HGetAll(ctx, ks.HaltKey(ks.PartitionStream(category, keyName(k)), group))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	var out []Halt
	for k, cmd := range cmds {
		h := keyspace.DecodeHalt(cmd.Val())
		if h == nil {
			continue
		}
		seq := 0
		msgs, err := c.XRangeN(ctx, h.Stream, h.EntryID, h.EntryID, 1).Result()
		if err != nil {
			return nil, err
		}
		if len(msgs) == 1 {
			if ev, err := engine.EventFromMessage(msgs[0]); err == nil {
				var p payload
				if json.Unmarshal(ev.Data, &p) == nil {
					seq = p.Seq
				}
			}
		}
		out = append(out, Halt{Key: keyName(k), Seq: seq})
	}
	return out, nil
}

// deleteKeys deletes every key whose name holds the run id (the workload's streams,
// index, leases, marks), on every master.
func deleteKeys(ctx context.Context, c redis.UniversalClient, runID string) error {
	del := func(ctx context.Context, n redis.UniversalClient) error {
		it := n.Scan(ctx, 0, "*"+runID+"*", 1000).Iterator()
		for it.Next(ctx) {
			if err := n.Del(ctx, it.Val()).Err(); err != nil {
				return err
			}
		}
		return it.Err()
	}
	return onMasters(ctx, c, del)
}
