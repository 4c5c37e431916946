package engine

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

//go:embed scripts/*.lua
var scriptFS embed.FS

// scriptSource is the source of each script, for loading them in one pipeline:
// redis.Script.Load must not be queued on a pipeline (it records the not-yet-known reply
// as the script's hash).
var scriptSource = map[*redis.Script]string{}

func mustScript(name string) *redis.Script {
	src, err := scriptFS.ReadFile("scripts/" + name)
	if err != nil {
		panic(fmt.Sprintf("engine: embedded script %s: %v", name, err))
	}
	return newScript(string(src))
}

// newScript makes a script of src and records its source.
func newScript(src string) *redis.Script {
	s := redis.NewScript(src)
	scriptSource[s] = src
	return s
}

// The Lua scripts; each file's header documents KEYS, ARGV and return codes.
var (
	scriptAcquire  = mustScript("acquire.lua")
	scriptRelease  = mustScript("release.lua")
	scriptAck      = mustScript("ack.lua")
	scriptAckMany  = mustScript("ackmany.lua")
	scriptPublish  = mustScript("publish.lua")
	scriptDrain    = mustScript("drain.lua")
	scriptHalt     = mustScript("halt.lua")
	scriptResolve  = mustScript("resolve.lua")
	scriptReap     = mustScript("reap.lua")
	scriptTrim     = mustScript("trim.lua")
	scriptReplay   = mustScript("replay.lua")
	scriptUnindex  = mustScript("unindex.lua")
	scriptMark     = mustScript("mark.lua")
	scriptGiveBack = mustScript("giveback.lua")
	scriptSweep    = mustScript("sweep.lua")
	// scriptRenew runs on Redis Cluster only (its flags line is not understood by the
	// embedded server of seqctl dev), so it is not in allScripts.
	scriptRenew = mustScript("renew.lua")
	// scriptAckNode runs on Redis Cluster only, for the same reason.
	scriptAckNode = mustScript("acknode.lua")
)

var allScripts = []*redis.Script{scriptAcquire, scriptRelease, scriptAck, scriptAckMany, scriptPublish, scriptDrain, scriptHalt, scriptResolve, scriptReap, scriptTrim, scriptReplay, scriptUnindex, scriptGiveBack, scriptMark, scriptSweep}

// loadScripts puts every script into the server's script cache. The cache is empty after
// a restart, a failover to a replica that never saw the scripts, or SCRIPT FLUSH, so no
// caller may assume a load lasts: Script.Run falls back to EVAL by itself, and pipelined
// calls go through runPipelined, which reloads and retries on NOSCRIPT.
//
// On Redis Cluster each script is loaded on every master (a pipelined SCRIPT LOAD would
// reach one node only), the renewal script included.
func loadScripts(ctx context.Context, c pipeliner) error {
	if cc, ok := c.(*redis.ClusterClient); ok {
		for _, s := range append(allScripts, scriptRenew, scriptAckNode, scriptSweepCluster) {
			if err := cc.ScriptLoad(ctx, scriptSource[s]).Err(); err != nil {
				return translateRedisErr(err)
			}
		}
		return nil
	}
	pipe := c.Pipeline()
	for _, s := range allScripts {
		pipe.ScriptLoad(ctx, scriptSource[s])
	}
	_, err := pipe.Exec(ctx)
	return translateRedisErr(err)
}

// pipeliner is the part of a client that loadScripts and runPipelined use.
type pipeliner interface{ Pipeline() redis.Pipeliner }

// isNoScript reports a NOSCRIPT reply: the script cache lost the script.
func isNoScript(err error) bool { return redis.HasErrorPrefix(err, "NOSCRIPT") }

// runPipelined sends n script calls in one pipeline (call(pipe, i) queues the i-th with
// EvalSha) and returns their replies. Calls answered NOSCRIPT did not run; after
// reloading the scripts they are sent once more, so an emptied script cache costs one
// extra round trip, never a lost call. The error is the pipeline's connection-level
// error, if any; per-call errors are on the returned commands.
func runPipelined(ctx context.Context, c pipeliner, n int, call func(pipe redis.Pipeliner, i int) *redis.Cmd) ([]*redis.Cmd, error) {
	cmds := make([]*redis.Cmd, n)
	pipe := c.Pipeline()
	for i := range cmds {
		cmds[i] = call(pipe, i)
	}
	_, err := pipe.Exec(ctx)
	var again []int
	for i, cmd := range cmds {
		if isNoScript(cmd.Err()) {
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		return cmds, connErr(err)
	}
	if err := loadScripts(ctx, c); err != nil {
		return cmds, err
	}
	pipe = c.Pipeline()
	for _, i := range again {
		cmds[i] = call(pipe, i)
	}
	_, err = pipe.Exec(ctx)
	return cmds, connErr(err)
}

// connErr keeps a pipeline error only when it is not a reply of Redis to one command
// (those stay on their commands): a connection failure, a timeout, a cancelled context.
func connErr(err error) error {
	var re redis.Error
	if err == nil || errors.Is(err, redis.Nil) || errors.As(err, &re) {
		return nil
	}
	return translateRedisErr(err)
}

// Sentinel errors of the engine.
var (
	// ErrFenced: the caller no longer holds the lease at its generation (another instance
	// took over, or its session expired). The caller must stop touching the partition.
	ErrFenced = errors.New("engine: fenced: lease no longer held at this generation")
	// ErrSessionLost: the instance's session expired (it stalled past the lease TTL); all
	// its leases are void and it must start a new session.
	ErrSessionLost = errors.New("engine: session lost: instance stalled past the lease TTL")
	// ErrHalted: the partition is halted on a poison head.
	ErrHalted = errors.New("engine: partition halted")
	// ErrHeadMoved: an operator action named a head entry that is no longer the head.
	ErrHeadMoved = errors.New("engine: head moved")
	// ErrNotHalted: an operator action needs a halted head (or force).
	ErrNotHalted = errors.New("engine: head is not halted")
	// ErrEntryGone: the entry is no longer in the stream.
	ErrEntryGone = errors.New("engine: entry no longer in the stream")
	// ErrNotSupported: the broker does not support partition operations (inline broker).
	ErrNotSupported = errors.New("engine: not supported by this broker")
	// ErrRedisUnavailable wraps connection-level failures talking to Redis.
	ErrRedisUnavailable = errors.New("engine: redis unavailable")
	// ErrRedisOutOfMemory: Redis refused a write at its maxmemory limit (policy
	// noeviction). Nothing was written; it goes away when memory is freed.
	ErrRedisOutOfMemory = errors.New("engine: redis is out of memory")
)

// codeErr maps a script's integer return code to a typed error, in one place.
func codeErr(code int64) error {
	switch code {
	case -1:
		return ErrFenced
	case -2:
		return ErrHalted
	case -3:
		return ErrSessionLost
	case -4:
		return ErrHeadMoved
	case -5:
		return ErrNotHalted
	case -6:
		return ErrEntryGone
	}
	return nil
}

// translateRedisErr turns go-redis network errors into ErrRedisUnavailable, keeping the
// cause, so callers can tell "Redis is down" from a logic error.
func translateRedisErr(err error) error {
	if err == nil || errors.Is(err, redis.Nil) {
		return err
	}
	var re redis.Error
	if errors.As(err, &re) {
		if perr := noPermissionError(err); perr != nil {
			return perr
		}
		if strings.HasPrefix(re.Error(), "OOM ") {
			return fmt.Errorf("%w: it reached its maxmemory limit with the noeviction policy, so nothing was written; free memory or raise maxmemory (%w)", ErrRedisOutOfMemory, err)
		}
		return fmt.Errorf("engine: redis: %w", err)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
}
