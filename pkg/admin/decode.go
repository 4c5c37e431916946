package admin

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/pkg/engine"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// execTolerant runs a pipeline, accepting Redis reply errors of single commands (a
// missing stream answers XINFO with an error, a missing key GET with nil) and failing on
// anything else (the connection).
func execTolerant(ctx context.Context, pipe redis.Pipeliner) error {
	_, err := pipe.Exec(ctx)
	if err == nil || errors.Is(err, redis.Nil) {
		return nil
	}
	var re redis.Error
	if errors.As(err, &re) {
		return nil
	}
	return translate(err)
}

// splitLease reads a lease value (see keyspace.Lease).
func splitLease(v string) (owner string, gen int64) {
	l, _ := keyspace.ParseLease(v)
	return l.Owner, l.Generation
}

// instanceOf returns the instance id of a session owner (see keyspace.Owner).
func instanceOf(owner string) string { return keyspace.InstanceOfOwner(owner) }

// haltFromHash reads a halt record, nil when there is none (see keyspace.Halt).
func haltFromHash(m map[string]string) *engine.HaltRecord { return keyspace.DecodeHalt(m) }

// idMillis returns the millisecond part of a stream entry id.
func idMillis(id string) int64 { return int64(keyspace.ParseStreamID(id).MS) }
