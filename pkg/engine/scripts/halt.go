package scripts

import (
	"context"

	"github.com/redis/go-redis/v9"
)

var haltScript = load("halt.lua", false)

// Halt writes a partition's halt record, fenced (halt.lua).
type Halt struct {
	Lease, Live, Record string
	Token               string
	Fields              []any // the record's field/value pairs (keyspace.Halt.Fields)
}

// Run calls the script; fenced is true when the lease was not the caller's (nothing was
// written).
func (c Halt) Run(ctx context.Context, rdb redis.Scripter) (fenced bool, err error) {
	n, err := haltScript.Run(ctx, rdb, []string{c.Lease, c.Live, c.Record}, append([]any{c.Token}, c.Fields...)...).Int64()
	return n == -1, err
}
