// Package scripts holds the engine's Lua scripts, each next to its Go call: a type whose
// fields are the script's KEYS and ARGV (each file's header documents them, with units),
// and whose reply comes back parsed, with its codes named. Every action on a partition
// runs in one of these scripts, so that it is atomic with its fence check.
//
// The engine is the only intended caller: the API follows the scripts, with no
// compatibility promise. publish.lua and mark.lua are also the scripts a publisher in
// another language runs (README, "Publishing from another language"), so they take no
// prelude and stay usable as they are.
//
// Scripts that begin with the line "--#prelude" get prelude.lua (shared helpers, such as
// the stream id comparisons) prepended when they are loaded.
package scripts

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

//go:embed *.lua
var files embed.FS

// script is one Lua script as Redis runs it.
type script struct {
	*redis.Script
	name, src string
}

// all are the scripts Load puts in the cache of every server; cluster the ones only a
// Redis Cluster runs (their flags line is not understood by the embedded server of
// seqctl dev).
var all, clusterOnly []*script

// load reads an embedded script, with the prelude when it asks for it.
func load(name string, onCluster bool) *script {
	b, err := files.ReadFile(name)
	if err != nil {
		panic(fmt.Sprintf("scripts: embedded %s: %v", name, err))
	}
	return register(name, string(b), onCluster)
}

// register makes a script of src: the prelude is added when its first line (after a
// "#!lua" flags line) is "--#prelude".
func register(name, src string, onCluster bool) *script {
	shebang := ""
	if strings.HasPrefix(src, "#!") {
		i := strings.IndexByte(src, '\n') + 1
		shebang, src = src[:i], src[i:]
	}
	if rest, ok := strings.CutPrefix(src, "--#prelude\n"); ok {
		p, err := files.ReadFile("prelude.lua")
		if err != nil {
			panic(fmt.Sprintf("scripts: embedded prelude.lua: %v", err))
		}
		src = string(p) + rest
	}
	src = shebang + src
	s := &script{Script: redis.NewScript(src), name: name, src: src}
	if onCluster {
		clusterOnly = append(clusterOnly, s)
	} else {
		all = append(all, s)
	}
	return s
}

// byName returns the script registered under name (the one-node variant when there are
// two), or nil.
func byName(name string) *script {
	for _, s := range append(all[:len(all):len(all)], clusterOnly...) {
		if s.name == name {
			return s
		}
	}
	return nil
}

// Hash returns the SHA1 digest Redis knows the named script by (for instance
// "publish.lua"), or "" when there is no such script: tests that watch or fault the
// traffic use it to recognise a call.
func Hash(name string) string {
	if s := byName(name); s != nil {
		return s.Hash()
	}
	return ""
}

// Source returns the text of the named script as Redis runs it (prelude included), or
// "" when there is no such script.
func Source(name string) string {
	if s := byName(name); s != nil {
		return s.src
	}
	return ""
}

// call is a typed call that knows its KEYS and ARGV.
type call interface{ args() ([]string, []any) }

// run runs c with EVALSHA, falling back to EVAL (which caches the script) on NOSCRIPT.
func (s *script) run(ctx context.Context, rdb redis.Scripter, c call) *redis.Cmd {
	keys, args := c.args()
	return s.Run(ctx, rdb, keys, args...)
}

// evalSha queues c on a pipeline or a transaction.
func (s *script) evalSha(ctx context.Context, pipe redis.Pipeliner, c call) *redis.Cmd {
	keys, args := c.args()
	return s.EvalSha(ctx, pipe, keys, args...)
}

// Pipeliner is the part of a client that Load and RunPipelined use.
type Pipeliner interface{ Pipeline() redis.Pipeliner }

// Load puts every script into the server's script cache. The cache is empty after a
// restart, a failover to a replica that never saw the scripts, or SCRIPT FLUSH, so no
// caller may assume a load lasts: a Run falls back to EVAL by itself, and pipelined calls
// go through RunPipelined, which reloads and retries on NOSCRIPT. On Redis Cluster each
// script is loaded on every master (a pipelined SCRIPT LOAD would reach one node only),
// the cluster-only ones included.
func Load(ctx context.Context, c Pipeliner) error {
	if cc, ok := c.(*redis.ClusterClient); ok {
		for _, s := range append(append([]*script{}, all...), clusterOnly...) {
			if err := cc.ScriptLoad(ctx, s.src).Err(); err != nil {
				return err
			}
		}
		return nil
	}
	pipe := c.Pipeline()
	for _, s := range all {
		pipe.ScriptLoad(ctx, s.src)
	}
	_, err := pipe.Exec(ctx)
	return err
}

// IsNoScript reports a NOSCRIPT reply: the script cache lost the script.
func IsNoScript(err error) bool { return redis.HasErrorPrefix(err, "NOSCRIPT") }

// RunPipelined sends n script calls in one pipeline (call(pipe, i) queues the i-th, with
// a call type's EvalSha) and returns their replies. Calls answered NOSCRIPT did not run;
// after reloading the scripts they are sent once more, so an emptied script cache costs
// one extra round trip, never a lost call. The error is the pipeline's connection-level
// error, if any; per-call errors are on the returned commands.
func RunPipelined(ctx context.Context, c Pipeliner, n int, call func(pipe redis.Pipeliner, i int) *redis.Cmd) ([]*redis.Cmd, error) {
	cmds := make([]*redis.Cmd, n)
	pipe := c.Pipeline()
	for i := range cmds {
		cmds[i] = call(pipe, i)
	}
	_, err := pipe.Exec(ctx)
	var again []int
	for i, cmd := range cmds {
		if IsNoScript(cmd.Err()) {
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		return cmds, ConnErr(err)
	}
	if err := Load(ctx, c); err != nil {
		return cmds, err
	}
	pipe = c.Pipeline()
	for _, i := range again {
		cmds[i] = call(pipe, i)
	}
	_, err = pipe.Exec(ctx)
	return cmds, ConnErr(err)
}

// ConnErr keeps a pipeline error only when it is not a reply of Redis to one command
// (those stay on their commands): a connection failure, a timeout, a cancelled context.
func ConnErr(err error) error {
	var re redis.Error
	if err == nil || errors.Is(err, redis.Nil) || errors.As(err, &re) {
		return nil
	}
	return err
}

// ErrReply is a reply of a shape its script never gives: a bug, or another script
// answering under the same name.
var ErrReply = errors.New("scripts: unexpected reply")

// replyError says which script gave an unexpected reply.
func replyError(name string, v any) error { return fmt.Errorf("%w from %s: %v", ErrReply, name, v) }

// ints reads an integer array reply, or returns the call's error.
func ints(name string, cmd *redis.Cmd) ([]int64, error) {
	if err := cmd.Err(); err != nil {
		return nil, err
	}
	return intsOf(name, cmd.Val())
}

// intsOf reads an integer array.
func intsOf(name string, v any) ([]int64, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, replyError(name, v)
	}
	out := make([]int64, len(list))
	for i, x := range list {
		n, ok := x.(int64)
		if !ok {
			return nil, replyError(name, v)
		}
		out[i] = n
	}
	return out, nil
}

// head reads the first element of an array reply as its code, and the rest, or returns
// the call's error.
func head(name string, cmd *redis.Cmd) (int64, []any, error) {
	if err := cmd.Err(); err != nil {
		return 0, nil, err
	}
	return headOf(name, cmd.Val())
}

// reply reads a reply whose first element is the script's answer: read turns the answer
// and the rest into R.
func reply[R any](name string, cmd *redis.Cmd, read func(code int64, rest []any) (R, error)) (R, error) {
	code, rest, err := head(name, cmd)
	if err != nil {
		var none R
		return none, err
	}
	return read(code, rest)
}

// headOf reads the first element of an array as its code, and the rest.
func headOf(name string, v any) (int64, []any, error) {
	list, ok := v.([]any)
	if !ok || len(list) == 0 {
		return 0, nil, replyError(name, v)
	}
	code, ok := list[0].(int64)
	if !ok {
		return 0, nil, replyError(name, v)
	}
	return code, list[1:], nil
}

// str reads element i of rest as a string ("" when absent).
func str(rest []any, i int) string {
	if i < len(rest) {
		s, _ := rest[i].(string)
		return s
	}
	return ""
}

// num reads element i of rest as an integer (0 when absent).
func num(rest []any, i int) int64 {
	if i < len(rest) {
		n, _ := rest[i].(int64)
		return n
	}
	return 0
}
