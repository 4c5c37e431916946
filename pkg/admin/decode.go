package admin

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/pkg/engine"
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

// splitLease parses a lease value "{owner}:{generation}".
func splitLease(v string) (owner string, gen int64) {
	i := strings.LastIndexByte(v, ':')
	if i < 0 {
		return "", 0
	}
	gen, _ = strconv.ParseInt(v[i+1:], 10, 64)
	return v[:i], gen
}

// instanceOf returns the instance id of a session owner "{instance}.{incarnation}".
func instanceOf(owner string) string {
	i := strings.LastIndexByte(owner, '.')
	if i < 0 {
		return owner
	}
	return owner[:i]
}

// haltFromHash reads a halt record (fields entry, lane, stream, attempts, error,
// since_ms, owner, generation), nil when there is none.
func haltFromHash(m map[string]string) *engine.HaltRecord {
	if len(m) == 0 || m["entry"] == "" {
		return nil
	}
	h := &engine.HaltRecord{EntryID: m["entry"], Stream: m["stream"], Error: m["error"], Owner: m["owner"]}
	h.Lane, _ = strconv.Atoi(m["lane"])
	h.Attempts, _ = strconv.Atoi(m["attempts"])
	h.Generation, _ = strconv.ParseInt(m["generation"], 10, 64)
	if ms, err := strconv.ParseInt(m["since_ms"], 10, 64); err == nil {
		h.Since = time.UnixMilli(ms).UTC()
	}
	return h
}

// idMillis returns the millisecond part of a stream entry id.
func idMillis(id string) int64 {
	i := strings.IndexByte(id, '-')
	if i < 0 {
		return 0
	}
	ms, _ := strconv.ParseInt(id[:i], 10, 64)
	return ms
}
