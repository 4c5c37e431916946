package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/testkit"
)

// The attempt number a handler gets is the number of times that event reached a handler,
// this run included: reads that never reached one do not count, whatever refused them. A
// busy partition's read transaction (worker.drain) is refused here in every way it can
// be, in the middle of a backlog, and every event's runs must then carry the attempts
// 1, 2, 3, ... in order. A poison event must run exactly max_retries times before its
// partition halts.
func TestAttemptsCountHandlerRuns(t *testing.T) {
	cases := []struct {
		name string
		// refuse makes the next read transaction of the busy partition be refused, while
		// the handler holds seq 31, the last of the second batch (the read that follows it
		// is a native one, and carries the acknowledgement of seq 31);
		// after returns the partition to its owner once the refusal happened.
		refuse func(t *testing.T, f *nativeReadFixture) (after func())
		// foreign are sequence numbers another consumer took: their first run is
		// attempt 2, since nobody can know whether that reader ran them.
		foreign []int
	}{
		{name: "fenced", refuse: func(t *testing.T, f *nativeReadFixture) func() {
			ctx := context.Background()
			if err := f.rdb.Set(ctx, f.lease, "thief:1", redis.KeepTTL).Err(); err != nil {
				t.Fatal(err)
			}
			return func() {
				testkit.WaitFor(t, 10*time.Second, "the owner's read refused by the fence", func() bool {
					n, _ := f.rdb.XPending(ctx, f.stream, "Projector").Result()
					return n != nil && n.Count > 16
				})
				if err := f.rdb.Del(ctx, f.lease).Err(); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{name: "script cache flushed", refuse: func(t *testing.T, f *nativeReadFixture) func() {
			if err := f.rdb.ScriptFlush(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			return func() {}
		}},
		{name: "older entry pending", foreign: seqs(32, 40), refuse: func(t *testing.T, f *nativeReadFixture) func() {
			got, err := f.rdb.XReadGroup(context.Background(), &redis.XReadGroupArgs{
				Group: "Projector", Consumer: "other", Streams: []string{f.stream, ">"}, Count: 8, Block: -1,
			}).Result()
			if err != nil || len(got[0].Messages) != 8 {
				t.Fatalf("reading 8 entries as another consumer: %v %v", got, err)
			}
			return func() {}
		}},
		{name: "halted", refuse: func(t *testing.T, f *nativeReadFixture) func() {
			ctx := context.Background()
			head, err := f.rdb.XRangeN(ctx, f.stream, "-", "+", 33).Result()
			if err != nil {
				t.Fatal(err)
			}
			id := head[32].ID // seq 32: the first entry of the next read
			halt := f.e.keys.HaltKey(f.stream, "Projector")
			if err := f.rdb.HSet(ctx, halt, "entry", id, "lane", "0", "stream", f.stream, "attempts", "3", "error", "test").Err(); err != nil {
				t.Fatal(err)
			}
			return func() {
				testkit.WaitFor(t, 10*time.Second, "the owner's read refused by the halt", func() bool {
					n, _ := f.rdb.XPending(ctx, f.stream, "Projector").Result()
					return n != nil && n.Count >= 16
				})
				b := NewRedisBroker(f.rdb)
				if err := b.Retry(ctx, HeadRef{Group: "Projector", Category: "order", Key: "K"}, id); err != nil {
					t.Fatal(err)
				}
			}
		}},
	}
	for _, tc := range cases {
		for _, maxUnacked := range []int{1, 16} {
			t.Run(fmt.Sprintf("%s/max_unacked=%d", tc.name, maxUnacked), func(t *testing.T) {
				onBoth(t, func(t *testing.T, tg redisTarget) {
					const poison = 40 // read by the refused transaction
					f := startNativeReadFixture(t, tg, 100, 31, maxUnacked, poison)
					after := tc.refuse(t, f)
					close(f.rec.release)
					after()
					testkit.WaitFor(t, 20*time.Second, "the poison event halted its partition", func() bool {
						return f.rdb.Exists(context.Background(), f.e.keys.HaltKey(f.stream, "Projector")).Val() == 1 &&
							f.rec.runsOf(poison) >= 1
					})
					runs := f.rec.snapshot()
					checkAttempts(t, runs, tc.foreign)
					if n := f.rec.runsOf(poison); n != 3 {
						t.Errorf("the poison event ran %d times before its partition halted, want max_retries = 3", n)
					}
					h, err := NewRedisBroker(f.rdb).Halt(context.Background(), HeadRef{Group: "Projector", Category: "order", Key: "K"})
					if err != nil || h == nil {
						t.Fatalf("halt record: %v %v", h, err)
					}
					if h.Attempts != 3 {
						t.Errorf("the halt record says %d attempts, want 3", h.Attempts)
					}
				})
			})
		}
	}
}

// checkAttempts checks that the k-th run of every event carried attempt k (k from 1), and
// for the foreign events, which another reader took first, k+1.
func checkAttempts(t *testing.T, runs []recordedRun, foreign []int) {
	t.Helper()
	took := map[int]bool{}
	for _, s := range foreign {
		took[s] = true
	}
	seen := map[int]int{}
	for _, r := range runs {
		seen[r.seq]++
		want := seen[r.seq]
		if took[r.seq] {
			want++
		}
		if r.attempt != want {
			t.Errorf("seq %d: run %d carried attempt %d, want %d", r.seq, seen[r.seq], r.attempt, want)
		}
	}
}

// The same after the owner changes while it holds a batch it has only begun: entries it
// had read and not started count no attempt for the next owner, whether the old owner
// crashed (killed: it can tell Redis nothing), lost its lease to another owner or lost
// its session; the entry it was running counts one.
func TestAttemptsAfterAnOwnerChange(t *testing.T) {
	cases := []struct {
		name   string
		change func(t *testing.T, f *nativeReadFixture, tg redisTarget)
	}{
		{name: "crashed", change: func(t *testing.T, f *nativeReadFixture, tg redisTarget) {
			done := make(chan struct{})
			go func() { crash(f.e); close(done) }()
			testkit.WaitFor(t, 5*time.Second, "the engine killed", f.e.killed.Load)
			close(f.rec.release)
			<-done
			startEngineOn(t, tg, f.e.cfg.Domain, "i2", func(c *EngineConfig) {
				c.Timing = fastTiming(2 * time.Second)
				c.BatchSize, c.MaxUnacked = 16, 1
			})
		}},
		{name: "lease taken", change: func(t *testing.T, f *nativeReadFixture, tg redisTarget) {
			ctx := context.Background()
			if err := f.rdb.Set(ctx, f.lease, "thief:1", redis.KeepTTL).Err(); err != nil {
				t.Fatal(err)
			}
			close(f.rec.release)
			testkit.WaitFor(t, 10*time.Second, "the owner fenced", func() bool { return len(f.e.Owned()) == 0 })
			if err := f.rdb.Del(ctx, f.lease).Err(); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "session lost", change: func(t *testing.T, f *nativeReadFixture, tg redisTarget) {
			ctx := context.Background()
			owner, _ := f.e.sess.current()
			if err := f.rdb.Del(ctx, f.e.keys.SessionKey(owner)).Err(); err != nil {
				t.Fatal(err)
			}
			testkit.WaitFor(t, 10*time.Second, "the session over", func() bool { return f.e.sess.live() == nil || f.e.sess.live().owner != owner })
			close(f.rec.release)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			onBoth(t, func(t *testing.T, tg redisTarget) {
				const poison = 25 // read ahead by the first owner
				f := startNativeReadFixture(t, tg, 60, 20, 1, poison)
				tc.change(t, f, tg)
				testkit.WaitFor(t, 30*time.Second, "the poison event halted its partition", func() bool {
					return f.rdb.Exists(context.Background(), f.e.keys.HaltKey(f.stream, "Projector")).Val() == 1
				})
				runs := f.rec.snapshot()
				checkAttempts(t, runs, nil)
				if n := f.rec.runsOf(poison); n != 3 {
					t.Errorf("the poison event ran %d times before its partition halted, want max_retries = 3", n)
				}
				if n := f.rec.runsOf(20); n != 2 {
					t.Errorf("the event in flight at the change ran %d times, want 2", n)
				}
			})
		})
	}
}
