package verify

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/redis/go-redis/v9"
)

// Fault kinds that RandomFaults injects.
const (
	FaultInstanceStop = "instance stopped and started again"
	FaultScriptFlush  = "SCRIPT FLUSH"
	FaultClientPause  = "CLIENT PAUSE 500 ms"
	FaultDrop         = "connections of an instance dropped"
	FaultCrash        = "instance crashed and started again"
)

// RandomFaults returns a Faults function for a staging deployment: about every `every`
// (spread between half and one and a half times it) one fault chosen at random from
// seed: an engine instance of the run stopped abruptly and started again 1 to 3 s later;
// one crashed (Control.Crash: nothing acknowledged or released; its partitions move
// once its session expires, after the lease TTL) and started again 1 to 3 s later;
// SCRIPT FLUSH on every master (every client must load its scripts again); CLIENT PAUSE
// of writes for 500 ms on every master (every client of the server waits); every
// connection of an instance closed by the server (CLIENT KILL). The same seed
// gives the same sequence of faults. Each fault is reported to note (when not nil), and
// counted in counts (guarded by the caller reading it only after the run).
func RandomFaults(seed uint64, every time.Duration, note func(string), counts map[string]int) func(ctx context.Context, c *Control) {
	return func(ctx context.Context, c *Control) {
		rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
		for {
			wait := every/2 + time.Duration(rng.Int64N(int64(every)+1))
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			// bounce stops a random instance with stop and starts it again 1 to 3 s later.
			bounce := func(what string, stop func(int)) (string, error) {
				i := rng.IntN(c.Instances())
				stop(i)
				select {
				case <-ctx.Done():
				case <-time.After(time.Duration(1000+rng.IntN(2000)) * time.Millisecond):
				}
				counts[what]++
				return fmt.Sprintf("%s (instance %d)", what, i), c.Start(i)
			}
			kind, err := "", error(nil)
			switch rng.IntN(5) {
			case 0:
				kind, err = bounce(FaultInstanceStop, c.Stop)
			case 4:
				kind, err = bounce(FaultCrash, c.Crash)
			case 3:
				i := rng.IntN(c.Instances())
				var n int
				n, err = c.Drop(ctx, i)
				kind = fmt.Sprintf("%s (instance %d: %d closed)", FaultDrop, i, n)
				counts[FaultDrop]++
			case 1:
				kind = FaultScriptFlush
				err = onMasters(ctx, c.o.Client, func(ctx context.Context, n redis.UniversalClient) error { return n.ScriptFlush(ctx).Err() })
				counts[FaultScriptFlush]++
			case 2:
				kind = FaultClientPause
				err = onMasters(ctx, c.o.Client, func(ctx context.Context, n redis.UniversalClient) error {
					return n.Do(ctx, "CLIENT", "PAUSE", 500, "WRITE").Err()
				})
				counts[FaultClientPause]++
			}
			if note != nil {
				if err != nil {
					note(fmt.Sprintf("%s: %v", kind, err))
				} else {
					note(kind)
				}
			}
		}
	}
}

// onMasters runs f on every master (the one node of a single Redis).
func onMasters(ctx context.Context, c redis.UniversalClient, f func(context.Context, redis.UniversalClient) error) error {
	if cc, ok := c.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return f(ctx, n) })
	}
	return f(ctx, c)
}
