// Package demo runs the whole system in one process for a first look: an embedded Redis
// (or a real one), the demo domain, several engine instances with demo handlers, and a
// publisher. It is what `seqctl dev` runs.
package demo

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/pkg/config"
	"github.com/seqctl/seqctl/pkg/engine"
	"github.com/seqctl/seqctl/pkg/redact"
)

// DomainTOML is the demo domain (testdata/demo/domain.toml is a copy kept equal by a test).
//
//go:embed domain.toml
var DomainTOML []byte

// Options configure a demo run. Zero values take the defaults.
type Options struct {
	// RedisURL points at a real Redis; empty starts an embedded one on a free loopback port.
	RedisURL string
	// Rate is the number of events published per second (default 50).
	Rate int
	// Instances is the number of engine instances (default 3).
	Instances int
	// Clients is the number of distinct client ids, i.e. order partitions (default 12).
	Clients int
	// Orders is the number of distinct order ids in rotation (default 40).
	Orders int
	// PoisonEvery makes every n-th order a poison event that halts its client's partition
	// (default DefaultPoisonEvery; negative: never).
	PoisonEvery int
	// Logger receives the engines' logs (default: discarded).
	Logger *slog.Logger
}

func (o *Options) defaults() {
	if o.Rate <= 0 {
		o.Rate = 50
	}
	if o.Instances <= 0 {
		o.Instances = 3
	}
	if o.Clients <= 0 {
		o.Clients = 12
	}
	if o.Orders <= 0 {
		o.Orders = 40
	}
	if o.PoisonEvery == 0 {
		o.PoisonEvery = DefaultPoisonEvery
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// DefaultPoisonEvery is the default of Options.PoisonEvery: at the default rate (50
// events/s, a third of them orders) one poison order a minute, so most partitions stay
// green for the first minutes and a halt still comes soon enough to try the operator
// commands on.
const DefaultPoisonEvery = 1000

// PoisonPeriod is the time between two poison orders with these options (one order in
// three events); 0 when there is no poison.
func (o Options) PoisonPeriod() time.Duration {
	o.defaults()
	if o.PoisonEvery < 0 {
		return 0
	}
	return time.Duration(float64(o.PoisonEvery*3) / float64(o.Rate) * float64(time.Second))
}

// Demo is a running demo.
type Demo struct {
	// URL is the Redis URL other seqctl commands can use (--redis-url).
	URL string
	// Embedded is set when the demo runs its own in-process Redis.
	Embedded bool
	Domain   *engine.Domain

	opts    Options
	mr      *miniredis.Miniredis
	rdb     *redis.Client
	broker  *engine.RedisBroker
	engines []*engine.Engine
	clients []*redis.Client
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	started time.Time

	published atomic.Int64
	handled   atomic.Int64
	failed    atomic.Int64
	pubErrors atomic.Int64
}

// Start starts Redis (unless RedisURL is set), the engines and the publisher.
func Start(ctx context.Context, opts Options) (*Demo, error) {
	opts.defaults()
	d := &Demo{opts: opts, started: time.Now()}
	if opts.RedisURL == "" {
		d.mr = miniredis.NewMiniRedis()
		if err := d.mr.StartAddr("127.0.0.1:0"); err != nil {
			return nil, fmt.Errorf("demo: start the embedded Redis: %w", err)
		}
		d.URL, d.Embedded = "redis://"+d.mr.Addr()+"/0", true
		if err := shardedPubSub(d.mr); err != nil {
			d.mr.Close()
			return nil, fmt.Errorf("demo: start the embedded Redis: %w", err)
		}
	} else {
		d.URL = opts.RedisURL
	}
	ok := false
	defer func() {
		if !ok {
			d.Close()
		}
	}()
	ropt, err := redis.ParseURL(d.URL)
	if err != nil {
		return nil, fmt.Errorf("demo: --redis-url %q: %w", redact.URL(d.URL), redact.Error(err, d.URL))
	}
	d.rdb = redis.NewClient(ropt)
	if err := d.rdb.Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("demo: Redis at %s does not answer: %w", ropt.Addr, err)
	}
	cfg, err := config.Parse("demo/domain.toml", DomainTOML)
	if err != nil {
		return nil, err
	}
	d.broker = engine.NewRedisBroker(d.rdb)
	d.Domain, err = cfg.Domain()
	if err != nil {
		return nil, err
	}
	if err := d.Domain.Init(d.broker); err != nil {
		return nil, err
	}
	for i := range d.Domain.Handlers {
		d.Domain.Handlers[i].Func = d.handle
	}
	for i := range d.Domain.ProcessManagers {
		d.Domain.ProcessManagers[i].Func = d.handle
	}
	runCtx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	for i := 0; i < opts.Instances; i++ {
		c := redis.NewClient(ropt)
		d.clients = append(d.clients, c)
		ec := cfg.EngineConfig(d.Domain, c)
		ec.InstanceID = "demo-" + strconv.Itoa(i+1)
		ec.Logger = opts.Logger.With("instance", ec.InstanceID)
		ec.ShutdownTimeout = 5 * time.Second
		if d.Embedded {
			// The embedded server sends no keyspace notifications: no probe at start.
			ec.KeyspaceNotifications = engine.KeyspaceOff
		}
		e, err := engine.New(ec)
		if err != nil {
			return nil, err
		}
		if err := e.Start(ctx); err != nil {
			return nil, err
		}
		d.engines = append(d.engines, e)
	}
	d.wg.Add(1)
	go d.publish(runCtx)
	ok = true
	return d, nil
}

// handle is every demo handler: a few milliseconds of work, and a refusal for poison.
func (d *Demo) handle(ctx context.Context, ev engine.Event) error {
	var p map[string]any
	if err := json.Unmarshal(ev.Data, &p); err != nil {
		return err
	}
	if poison, _ := p["poison"].(bool); poison {
		d.failed.Add(1)
		return errors.New("demo: poison order refused (resolve it with seqctl head skip|dlq|retry)")
	}
	t := time.NewTimer(time.Duration(1+rand.IntN(15)) * time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
	}
	d.handled.Add(1)
	return nil
}

// publish publishes at the configured rate: orders for random clients, then a shipment
// and a payment for each order.
func (d *Demo) publish(ctx context.Context) {
	defer d.wg.Done()
	tick := time.NewTicker(time.Second / time.Duration(d.opts.Rate))
	defer tick.Stop()
	n := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		n++
		// Order ids cycle through a bounded set: partition-per-key suits a bounded live
		// set of keys, and the demo should look like a healthy deployment.
		order := "o-" + strconv.Itoa((n/3)%d.opts.Orders)
		client := "client-" + strconv.Itoa(rand.IntN(d.opts.Clients)+1)
		var name string
		var data map[string]any
		switch n % 3 {
		case 0:
			poison := d.opts.PoisonEvery > 0 && (n/3)%d.opts.PoisonEvery == d.opts.PoisonEvery-1
			name, data = "OrderPlaced", map[string]any{"order_id": order, "client_id": client, "total": rand.IntN(500), "poison": poison}
		case 1:
			name, data = "OrderShipped", map[string]any{"order_id": order, "client_id": client}
		default:
			name, data = "PaymentConfirmed", map[string]any{"payment_id": "p-" + strconv.Itoa(n), "order_id": order, "amount": rand.IntN(500)}
		}
		b, _ := json.Marshal(data)
		if _, err := d.broker.Publish(ctx, d.Domain, name, b, engine.PublishOptions{}); err != nil {
			if ctx.Err() == nil {
				d.pubErrors.Add(1)
			}
			continue
		}
		d.published.Add(1)
	}
}

// Summary is a snapshot of the demo's progress.
type Summary struct {
	Uptime     time.Duration `json:"uptime"`
	Published  int64         `json:"published"`
	Handled    int64         `json:"handled"`
	Failed     int64         `json:"failed_attempts"`
	Owned      []int         `json:"owned_per_instance"`
	Halted     int           `json:"halted_partitions"`
	Partitions int           `json:"live_partitions"`
}

// Summary returns the current progress.
func (d *Demo) Summary() Summary {
	s := Summary{Uptime: time.Since(d.started).Round(time.Second), Published: d.published.Load(),
		Handled: d.handled.Load(), Failed: d.failed.Load()}
	parts := map[string]int{}
	for _, e := range d.engines {
		st := e.Stats()
		s.Owned = append(s.Owned, st.Owned)
		s.Halted += st.Halted
		for c, n := range st.LivePartitions {
			parts[c] = max(parts[c], n)
		}
	}
	for _, n := range parts {
		s.Partitions += n
	}
	return s
}

// String renders a one-line summary.
func (s Summary) String() string {
	return fmt.Sprintf("up %s: published %d, handled %d (all handlers), failed attempts %d, partitions %d, halted %d, owned per instance %v",
		s.Uptime, s.Published, s.Handled, s.Failed, s.Partitions, s.Halted, s.Owned)
}

// Client returns a client of the demo's Redis (owned by the demo).
func (d *Demo) Client() *redis.Client { return d.rdb }

// Close stops the publisher and the engines (gracefully) and the embedded Redis.
func (d *Demo) Close() {
	if d.cancel != nil {
		d.cancel()
	}
	d.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, e := range d.engines {
		wg.Add(1)
		go func() { defer wg.Done(); _ = e.Shutdown(ctx) }()
	}
	wg.Wait()
	for _, c := range d.clients {
		_ = c.Close()
	}
	if d.rdb != nil {
		_ = d.rdb.Close()
	}
	if d.mr != nil {
		d.mr.Close()
	}
}

// shardedPubSub gives the embedded Redis the sharded pub/sub commands the engine's
// doorbell uses (SPUBLISH in the publish scripts, SSUBSCRIBE and SUNSUBSCRIBE on the
// engine's pub/sub connection), which it lacks, as aliases of the plain ones: a single
// node has one shard, so they mean the same. Replies name the plain kinds ("message",
// "subscribe"), which the client reads alike.
func shardedPubSub(mr *miniredis.Miniredis) error {
	srv := mr.Server()
	for sharded, plain := range map[string]string{"SPUBLISH": "PUBLISH", "SSUBSCRIBE": "SUBSCRIBE", "SUNSUBSCRIBE": "UNSUBSCRIBE"} {
		err := srv.Register(sharded, func(c *server.Peer, _ string, args []string) {
			srv.Dispatch(c, append([]string{plain}, args...))
		})
		if err != nil {
			return err
		}
	}
	return nil
}
