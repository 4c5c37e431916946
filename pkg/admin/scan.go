package admin

import (
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/pkg/engine"
)

// scanCount is the COUNT hint of the SCAN for index keys: large, so that a keyspace of
// tens of thousands of keys is covered in a few round trips.
const scanCount = 10000

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

// scanCategories returns, sorted and once each, the given categories and those of every
// key named "{category}{suffix}" (an index or a registry).
func (a *Admin) scanCategories(ctx context.Context, suffix string, given []string) ([]string, error) {
	seen := map[string]bool{}
	out := make([]string, 0, len(given))
	for _, c := range given {
		seen[c] = true
		out = append(out, c)
	}
	err := a.scan(ctx, "*"+suffix, "", func(k string) {
		c := strings.TrimSuffix(k, suffix)
		if c != k && !seen[c] && engine.ValidateCategory(c) == nil {
			seen[c] = true
			out = append(out, c)
		}
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(out)
	return out, nil
}
