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
	// Stream, Group, Consumer and Entry name the head, pending under the caller's
	// consumer; its delivery count is set to Attempts.
	Stream, Group, Consumer, Entry string
	Attempts                       int
	Fields                         []any // the record's field/value pairs (keyspace.Halt.Fields)
}

// Run calls the script; fenced is true when the lease was not the caller's (nothing was
// written).
func (c Halt) Run(ctx context.Context, rdb redis.Scripter) (fenced bool, err error) {
	args := append([]any{c.Token, c.Group, c.Consumer, c.Entry, c.Attempts}, c.Fields...)
	n, err := haltScript.Run(ctx, rdb, []string{c.Lease, c.Live, c.Record, c.Stream}, args...).Int64()
	return n == -1, err
}
