package scripts

import (
	"context"
	"strconv"

	"github.com/redis/go-redis/v9"
)

var publishBatchScript = load("publishbatch.lua", false)

// PublishBatch appends many events in one call on one Redis node (publishbatch.lua):
// each one as Publish with Index (when partitioned) and EventMark, in order.
type PublishBatch struct {
	Control  string    // the control stream
	WindowMS int64     // how long an event id is remembered
	Events   []Publish // Stream, Index, EventMark, Bell, Key, Category, Fields; After for a predecessor in an earlier call
}

// PublishBatchReply is one event's answer.
type PublishBatchReply struct {
	PublishReply       // Appended, EntryID, AfterRefused
	Err          error // Redis refused the event's append (nothing appended)
}

// args returns the call's KEYS and ARGV.
func (c PublishBatch) args() ([]string, []any) {
	keys := make([]string, 0, 1+5*len(c.Events))
	keys = append(keys, c.Control)
	n := 1
	for _, e := range c.Events {
		n += 4 + len(e.Fields)
	}
	args := make([]any, 0, n)
	args = append(args, c.WindowMS)
	for _, e := range c.Events {
		s := e.Stream
		index, mark, after, flags := s, s, s, ""
		if e.Index != "" {
			index, flags = e.Index, flags+"i"
		}
		if e.EventMark != "" {
			mark, flags = e.EventMark, flags+"e"
		}
		if e.After != "" {
			after, flags = e.After, flags+"p"
		}
		keys = append(keys, s, index, mark, e.Bell, after)
		args = append(args, flags, e.Key, e.Category, len(e.Fields))
		args = append(args, e.Fields...)
	}
	return keys, args
}

// EvalSha queues the call on a pipeline (see RunPipelined).
func (c PublishBatch) EvalSha(ctx context.Context, pipe redis.Pipeliner) *redis.Cmd {
	return publishBatchScript.evalSha(ctx, pipe, c)
}

// Run calls the script.
func (c PublishBatch) Run(ctx context.Context, rdb redis.Scripter) ([]PublishBatchReply, error) {
	return ParsePublishBatch(publishBatchScript.run(ctx, rdb, c), len(c.Events))
}

// ParsePublishBatch reads the reply of a call of n events.
func ParsePublishBatch(cmd *redis.Cmd, n int) ([]PublishBatchReply, error) {
	if err := cmd.Err(); err != nil {
		return nil, err
	}
	list, ok := cmd.Val().([]any)
	if !ok || len(list) != n {
		return nil, replyError("publishbatch.lua", cmd.Val())
	}
	out := make([]PublishBatchReply, n)
	for i, v := range list {
		code, rest, err := headOf("publishbatch.lua", v)
		if err != nil {
			return nil, err
		}
		switch code {
		case 1, 0:
			out[i].Appended, out[i].EntryID = code == 1, str(rest, 0)
		case -1:
			out[i].AfterRefused = true
		case -2:
			out[i].Err = ReplyError(str(rest, 0))
		default:
			return nil, replyError("publishbatch.lua", "code "+strconv.FormatInt(code, 10))
		}
	}
	return out, nil
}

// ReplyError is an error reply of Redis that a script caught (redis.pcall) and returned
// as a value: it is a redis.Error, as the same reply to a command would be.
type ReplyError string

func (e ReplyError) Error() string { return string(e) }

// RedisError marks it as a reply of Redis (the redis.Error interface).
func (ReplyError) RedisError() {}
