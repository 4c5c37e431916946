package scripts

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

var drainScript = load("drain.lua", false)

// Drain is the owner's one call per batch (drain.lua): acknowledge what it handled, then
// read what comes next, all under the fence.
type Drain struct {
	Lease, Live, Halt string
	Pause             string   // the unit's pause record for the group
	Lanes             []string // primary first
	Token, Group      string
	Consumer          string
	Batch             int // how many new entries one read may return
	// ExpectID, when set, is the head the caller retries, on lane ExpectLane (0-based):
	// after a failure, or after an operator cleared the halt.
	ExpectLane int
	ExpectID   string
	// RearmPX is the lease TTL in ms that gives a dormant lease its expiry back when
	// entries are returned (Redis Cluster); 0 otherwise.
	RearmPX int64
	// NativeAfter is set when an XREADGROUP of the first lane ran just before the script
	// in the same transaction: the last id the caller read before it (the script judges
	// the read, see drain.lua).
	NativeAfter string
	// Owed is set when a native read's reply was lost: the script gives back first what
	// the caller's consumer read after this id.
	Owed string
	// TakeoverKeep is set on the first call after the caller took the lease: of a
	// previous owner's pending entries only the first TakeoverKeep may have run.
	TakeoverKeep int
	Acks         [][]string // per lane, the ids to acknowledge
}

// DrainCode is drain.lua's answer.
type DrainCode int64

// The answers of drain.lua.
const (
	DrainFenced   DrainCode = -1 // the lease or the session is not the caller's
	DrainHalted   DrainCode = -2 // a halt record exists (the acknowledgements were applied)
	DrainPaused   DrainCode = -3 // a pause record exists (the acknowledgements were applied); PauseTTL says for how long
	DrainEmpty    DrainCode = 0  // nothing to read: LastIDs holds each lane's last entry id
	DrainEntries  DrainCode = 1  // Entries of Lane; Deliveries is the first one's count
	DrainNative   DrainCode = 2  // the transaction's own read stands
	DrainResolved DrainCode = 3  // the expected head is no longer pending: carry on
)

// DrainReply is drain.lua's reply.
type DrainReply struct {
	Code       DrainCode
	Lane       int   // 0-based
	Deliveries int64 // the first entry's delivery count
	Entries    []redis.XMessage
	// All is set (DrainEntries) when Entries are everything the unit held to read: new
	// entries of the first lane, fewer than a batch, and no other lane exists.
	All bool
	// Fresh is set (DrainEntries, on a first call after the lease was taken) when no lane
	// had a consumer group before the call: no previous owner left consumers behind.
	Fresh   bool
	LastIDs []string // DrainEmpty: each lane's last entry id ("0-0" for none)
	// PauseTTL is, for DrainPaused, how long the pause record lives: -1 when it has no
	// end (an operator resumes it).
	PauseTTL time.Duration
}

func (c Drain) args() ([]string, []any) {
	keys := make([]string, 0, 4+len(c.Lanes))
	keys = append(append(keys, c.Lease, c.Live, c.Halt, c.Pause), c.Lanes...)
	expect, takeover := "", ""
	if c.ExpectID != "" {
		expect = strconv.Itoa(c.ExpectLane+1) + "|" + c.ExpectID
	}
	if c.TakeoverKeep > 0 {
		takeover = strconv.Itoa(c.TakeoverKeep)
	}
	args := []any{c.Token, c.Group, c.Consumer, c.Batch, expect, c.RearmPX, c.NativeAfter, c.Owed, takeover}
	for i := range c.Lanes {
		var ids []string
		if i < len(c.Acks) {
			ids = c.Acks[i]
		}
		args = append(args, len(ids))
		for _, id := range ids {
			args = append(args, id)
		}
	}
	return keys, args
}

// Run calls the script.
func (c Drain) Run(ctx context.Context, rdb redis.Scripter) (DrainReply, error) {
	return ParseDrain(drainScript.run(ctx, rdb, c))
}

// EvalSha queues the call on a pipeline or a transaction.
func (c Drain) EvalSha(ctx context.Context, pipe redis.Pipeliner) *redis.Cmd {
	return drainScript.evalSha(ctx, pipe, c)
}

// ParseDrain reads the reply of a call.
func ParseDrain(cmd *redis.Cmd) (DrainReply, error) {
	return reply("drain.lua", cmd, func(code int64, rest []any) (DrainReply, error) {
		r := DrainReply{Code: DrainCode(code)}
		switch r.Code {
		case DrainPaused:
			r.PauseTTL = -1
			if ms := num(rest, 0); ms >= 0 {
				r.PauseTTL = time.Duration(ms) * time.Millisecond
			}
		case DrainEmpty:
			r.LastIDs = make([]string, len(rest))
			for i := range rest {
				r.LastIDs[i] = str(rest, i)
			}
		case DrainEntries:
			r.Lane, r.Deliveries = int(num(rest, 0))-1, num(rest, 1)
			if len(rest) < 3 {
				return DrainReply{}, replyError("drain.lua", cmd.Val())
			}
			var err error
			if r.Entries, err = entries(rest[2]); err != nil {
				return DrainReply{}, err
			}
			r.All, r.Fresh = num(rest, 3) == 1, num(rest, 4) == 1
		}
		return r, nil
	})
}

// entries decodes a Lua-returned list of stream entries ({id, {f, v, ...}}).
func entries(v any) ([]redis.XMessage, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, replyError("drain.lua", v)
	}
	out := make([]redis.XMessage, 0, len(list))
	for _, it := range list {
		pair, ok := it.([]any)
		if !ok || len(pair) < 1 {
			continue
		}
		id, _ := pair[0].(string)
		var kv []any
		if len(pair) > 1 {
			kv, _ = pair[1].([]any)
		}
		vals := make(map[string]any, len(kv)/2)
		for i := 0; i+1 < len(kv); i += 2 {
			k, _ := kv[i].(string)
			vals[k] = kv[i+1]
		}
		out = append(out, redis.XMessage{ID: id, Values: vals})
	}
	return out, nil
}
