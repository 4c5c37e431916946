package engine

import (
	"context"
	"embed"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

//go:embed scripts/*.lua
var scriptFS embed.FS

func mustScript(name string) *redis.Script {
	src, err := scriptFS.ReadFile("scripts/" + name)
	if err != nil {
		panic(fmt.Sprintf("engine: embedded script %s: %v", name, err))
	}
	return redis.NewScript(string(src))
}

// The Lua scripts; each file's header documents KEYS, ARGV and return codes.
var (
	scriptAcquire = mustScript("acquire.lua")
	scriptRelease = mustScript("release.lua")
	scriptAck     = mustScript("ack.lua")
	scriptPublish = mustScript("publish.lua")
	scriptDrain   = mustScript("drain.lua")
	scriptHalt    = mustScript("halt.lua")
	scriptResolve = mustScript("resolve.lua")
	scriptReap    = mustScript("reap.lua")
	scriptTrim    = mustScript("trim.lua")
	scriptReplay  = mustScript("replay.lua")
)

var allScripts = []*redis.Script{scriptAcquire, scriptRelease, scriptAck, scriptPublish, scriptDrain, scriptHalt, scriptResolve, scriptReap, scriptTrim, scriptReplay}

// loadScripts makes sure every script is cached on the server, so that EVALSHA in a
// pipeline never meets NOSCRIPT.
func loadScripts(ctx context.Context, c redis.Scripter) error {
	for _, s := range allScripts {
		if err := s.Load(ctx, c).Err(); err != nil {
			return translateRedisErr(err)
		}
	}
	return nil
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
		return fmt.Errorf("engine: redis: %w", err)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("%w: %v", ErrRedisUnavailable, err)
}
