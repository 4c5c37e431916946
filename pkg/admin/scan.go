package admin

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// scanCluster is what a Redis Cluster client offers beyond redis.UniversalClient: a call
// on each master. SCAN on a cluster client reaches one node only, so a scan of the whole
// keyspace runs on every master.
type scanCluster interface {
	ForEachMaster(ctx context.Context, fn func(context.Context, *redis.Client) error) error
}

// scan calls fn with every key matching match (of Redis type typ, "" for any), on one node
// or on every master of a Redis Cluster. fn may be called concurrently from one goroutine
// per master on a cluster, so scan serialises the calls. A key can be reported twice
// (SCAN's own guarantee, and a slot migrating between masters during the scan): callers
// deduplicate.
func (a *Admin) scan(ctx context.Context, match, typ string, fn func(key string)) error {
	var mu sync.Mutex
	one := func(ctx context.Context, c redis.Cmdable) error {
		var cursor uint64
		for {
			var keys []string
			var next uint64
			var err error
			if typ != "" {
				keys, next, err = c.ScanType(ctx, cursor, match, scanCount, typ).Result()
			} else {
				keys, next, err = c.Scan(ctx, cursor, match, scanCount).Result()
			}
			if err != nil {
				return err
			}
			mu.Lock()
			for _, k := range keys {
				fn(k)
			}
			mu.Unlock()
			if cursor = next; cursor == 0 {
				return nil
			}
		}
	}
	var err error
	if cc, ok := a.rdb.(scanCluster); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return one(ctx, c) })
	} else {
		err = one(ctx, a.rdb)
	}
	return translate(err)
}
