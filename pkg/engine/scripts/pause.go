package scripts

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

var pauseScript = load("pause.lua", false)

// Pause pauses a unit for one group, or resumes it (pause.lua). No lease is needed.
type Pause struct {
	Record, Halt, Lease string
	Resume              bool          // resume instead of pausing
	For                 time.Duration // pause: its duration; 0: until resumed
	Fields              []any         // pause: the record's reason and by (keyspace.Pause.Fields)
}

// PauseCode is pause.lua's answer.
type PauseCode int64

// The answers of pause.lua.
const (
	PauseDone      PauseCode = 1  // paused, or resumed
	PauseReplaced  PauseCode = 2  // it was paused already: the record was replaced
	PauseHalted    PauseCode = -5 // pause: the unit is halted
	PauseNotPaused PauseCode = -6 // resume: the unit is not paused
)

// PauseReply is pause.lua's reply.
type PauseReply struct {
	Code         PauseCode
	Lease        string // the unit's lease value, "" when unowned
	Since, Until time.Time
}

// Run calls the script.
func (c Pause) Run(ctx context.Context, rdb redis.Scripter) (PauseReply, error) {
	op := "pause"
	if c.Resume {
		op = "resume"
	}
	args := append([]any{op, c.For.Milliseconds()}, c.Fields...)
	return reply("pause.lua", pauseScript.Run(ctx, rdb, []string{c.Record, c.Halt, c.Lease}, args...), func(code int64, rest []any) (PauseReply, error) {
		r := PauseReply{Code: PauseCode(code), Lease: str(rest, 0)}
		if ms, err := strconv.ParseInt(str(rest, 1), 10, 64); err == nil && ms > 0 {
			r.Since = time.UnixMilli(ms).UTC()
		}
		if ms, err := strconv.ParseInt(str(rest, 2), 10, 64); err == nil && ms > 0 {
			r.Until = time.UnixMilli(ms).UTC()
		}
		return r, nil
	})
}
