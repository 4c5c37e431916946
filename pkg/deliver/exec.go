package deliver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seqctl/seqctl/pkg/engine"
)

// ExecConfig configures the delivery of one handler to a command.
type ExecConfig struct {
	// Argv is the program and its arguments; the program is found on PATH unless it
	// contains a slash (then it is relative to Dir).
	Argv []string
	// Timeout bounds one attempt (default DefaultTimeout), from the moment the process has
	// started: time spent waiting for a handler slot or for the process to be started
	// never counts. At the timeout the process and its process group are killed (SIGKILL)
	// and the attempt fails.
	Timeout time.Duration
	// Dir is the working directory ("" = the current one).
	Dir string
	// Env is the environment the SEQ_* variables are added to (nil = os.Environ()).
	Env []string
	// Procs, when set, tracks the running processes so a forced exit can kill them.
	Procs *Procs
}

// StderrTailBytes is how much of a failed command's stderr (its end) goes into the
// failure reason.
const StderrTailBytes = 4096

// waitDelay is how long Wait waits for the stderr pipe to close after the process has
// exited or was killed (a grandchild outside the process group may hold it open).
const waitDelay = 2 * time.Second

// ExitError is a command that exited with a non-zero status or was killed. Its message is
// the failure reason recorded when the partition halts: "exit status 3: <stderr tail>".
type ExitError struct {
	// ExitCode is the exit status, -1 when the process was killed by a signal.
	ExitCode int
	// State describes the end: "exit status 3", "signal: killed".
	State string
	// TimedOut is set when seqctl killed the process at the handler's timeout.
	TimedOut bool
	Timeout  time.Duration
	// Stderr is the last StderrTailBytes of the command's stderr, trimmed.
	Stderr string
}

// maxReasonBytes is how much of a failure reason a halt record keeps (the engine keeps
// the end of a longer one). ExitError cuts the front of its stderr tail instead, so the
// exit status always survives.
const maxReasonBytes = 4096

func (e *ExitError) Error() string {
	var b strings.Builder
	if e.TimedOut {
		fmt.Fprintf(&b, "killed at the %v timeout", e.Timeout)
	} else {
		b.WriteString(e.State)
	}
	if e.Stderr == "" {
		b.WriteString(" (no stderr)")
		return b.String()
	}
	b.WriteString(": ")
	tail := e.Stderr
	if room := maxReasonBytes - b.Len(); len(tail) > room {
		tail = cleanTail([]byte(tail[len(tail)-room:]))
	}
	b.WriteString(tail)
	return b.String()
}

type execDeliverer struct {
	argv    []string
	timeout time.Duration
	dir     string
	env     []string
	procs   *Procs
	// start starts a command (default startCmd); tests delay it.
	start func(context.Context, *exec.Cmd) error
}

// Exec returns a HandlerFunc that runs cfg.Argv once per attempt, with the envelope (see
// Marshal) on stdin and the delivery in SEQ_* environment variables added to the
// environment. Exit status 0 means done; anything else fails the attempt with an
// *ExitError carrying the end of stderr. stdout is discarded. The command runs in a
// process group of its own, killed as a whole at the timeout or when the engine cancels
// the handler's context (lease lost, shutdown deadline).
func Exec(cfg ExecConfig) (engine.HandlerFunc, error) {
	x, err := newExec(cfg)
	if err != nil {
		return nil, err
	}
	return x.deliver, nil
}

func newExec(cfg ExecConfig) (*execDeliverer, error) {
	if len(cfg.Argv) == 0 || cfg.Argv[0] == "" {
		return nil, errors.New("deliver: exec needs a program to run")
	}
	x := &execDeliverer{argv: append([]string(nil), cfg.Argv...), timeout: cfg.Timeout, dir: cfg.Dir, procs: cfg.Procs}
	if x.timeout <= 0 {
		x.timeout = DefaultTimeout
	}
	x.env = cfg.Env
	if x.env == nil {
		x.env = os.Environ()
	}
	x.env = x.env[:len(x.env):len(x.env)] // appends below never share the backing array
	return x, nil
}

// ExecBatch returns the BatchFunc of a handler that takes runs of events (batch_max
// above 1): cfg.Argv runs once per attempt of a run, with the run's envelopes on stdin as
// NDJSON (MarshalNDJSON: one envelope per line, in order) and, next to the variables of a
// single delivery (SEQ_EVENT_ID is the first event's id), SEQ_FIRST_ENTRY,
// SEQ_LAST_ENTRY and SEQ_BATCH_SIZE. Exit status 0 means every event of the run is done;
// anything else fails the whole run, as for Exec.
func ExecBatch(cfg ExecConfig) (engine.BatchFunc, error) {
	x, err := newExec(cfg)
	if err != nil {
		return nil, err
	}
	return x.deliverBatch, nil
}

func (x *execDeliverer) deliver(ctx context.Context, ev engine.Event) error {
	d := deliveryOf(ctx, ev)
	body, err := Marshal(ev, d)
	if err != nil {
		return err
	}
	return x.run(ctx, d, ev.ID, body, nil)
}

// deliverBatch runs the command for a run of events, NDJSON on stdin.
func (x *execDeliverer) deliverBatch(ctx context.Context, evs []engine.Event) error {
	if len(evs) == 0 {
		return nil
	}
	d := deliveryOf(ctx, evs[0])
	body, err := MarshalNDJSON(evs, d)
	if err != nil {
		return err
	}
	first, last := batchEntries(d, len(evs))
	return x.run(ctx, d, evs[0].ID, body, []string{
		EnvFirstEntry + "=" + first,
		EnvLastEntry + "=" + last,
		EnvBatchSize + "=" + strconv.Itoa(len(evs)),
	})
}

// run runs the command once with body on stdin, the delivery of d whose (first) event is
// eventID in SEQ_* variables, and the variables more.
func (x *execDeliverer) run(ctx context.Context, d engine.Delivery, eventID string, body []byte, more []string) error {
	// The timeout bounds the process, not the wait for the process starter: it is armed
	// once the process runs (below), so a queue of starts never fails a healthy event.
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := exec.CommandContext(actx, x.argv[0], x.argv[1:]...)
	cmd.Dir = x.dir
	cmd.Stdin = bytes.NewReader(body)
	stderr := &tailBuffer{max: StderrTailBytes}
	cmd.Stderr = stderr
	tp, ts := engine.TraceHeaders(ctx)
	lv, lslot, lgen := limitFields(d)
	cmd.Env = append(x.env,
		EnvTraceParent+"="+tp, // set even when empty: never seqctl's own environment's
		EnvTraceState+"="+ts,
		EnvHandler+"="+d.Handler,
		EnvStream+"="+d.Stream,
		EnvCategory+"="+d.Category,
		EnvKey+"="+d.Key,
		EnvEventID+"="+eventID,
		EnvGeneration+"="+strconv.FormatInt(d.Generation, 10),
		EnvAttempt+"="+strconv.Itoa(d.Attempt),
		EnvLimitKey+"="+lv, // set even when empty, as the trace context
		EnvLimitSlot+"="+lslot,
		EnvLimitGeneration+"="+lgen,
	)
	cmd.Env = append(cmd.Env, more...)
	ownProcessGroup(cmd)
	cmd.Cancel = func() error { return killProcessGroup(cmd) }
	cmd.WaitDelay = waitDelay
	start := x.start
	if start == nil {
		start = startCmd
	}
	if err := start(ctx, cmd); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("exec %s: attempt cancelled before the process started (lease lost or shutdown): %w", x.argv[0], ctx.Err())
		}
		return fmt.Errorf("exec %s: %w", x.argv[0], err)
	}
	var timedOut atomic.Bool
	timer := time.AfterFunc(x.timeout, func() { timedOut.Store(true); cancel() })
	defer timer.Stop()
	x.procs.add(cmd)
	err := cmd.Wait()
	x.procs.remove(cmd)
	if err == nil || (errors.Is(err, exec.ErrWaitDelay) && cmd.ProcessState.Success()) {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("exec %s: attempt cancelled (lease lost or shutdown): %w", x.argv[0], ctx.Err())
	}
	xe := &ExitError{ExitCode: -1, Stderr: cleanTail(stderr.Bytes())}
	if st := cmd.ProcessState; st != nil {
		xe.ExitCode, xe.State = st.ExitCode(), st.String()
	} else {
		xe.State = err.Error()
	}
	if timedOut.Load() {
		xe.TimedOut, xe.Timeout = true, x.timeout
	}
	return xe
}

// cleanTail makes a stderr tail fit a reason: a multi-byte character cut at the start is
// dropped, invalid UTF-8 replaced, surrounding white space trimmed.
func cleanTail(b []byte) string {
	for i := 0; i < 3 && len(b) > 0 && b[0]&0xC0 == 0x80; i++ {
		b = b[1:]
	}
	return strings.TrimSpace(strings.ToValidUTF8(string(b), "\uFFFD"))
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	if len(p) >= t.max {
		t.buf = append(t.buf[:0], p[len(p)-t.max:]...)
		return n, nil
	}
	if over := len(t.buf) + len(p) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.buf = append(t.buf, p...)
	return n, nil
}

// Bytes returns a copy of the kept bytes.
func (t *tailBuffer) Bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]byte(nil), t.buf...)
}

// Procs tracks the commands exec deliveries are running, so that a forced exit (a second
// SIGTERM) can kill them: they run in process groups of their own, which a signal to
// seqctl's group does not reach. The zero value is ready; a nil *Procs tracks nothing.
type Procs struct {
	mu   sync.Mutex
	cmds map[*exec.Cmd]struct{} // guarded by mu
}

func (p *Procs) add(c *exec.Cmd) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmds == nil {
		p.cmds = map[*exec.Cmd]struct{}{}
	}
	p.cmds[c] = struct{}{}
}

func (p *Procs) remove(c *exec.Cmd) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.cmds, c)
}

// Running returns how many commands are running.
func (p *Procs) Running() int {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.cmds)
}

// KillAll kills every running command's process group (SIGKILL) and returns how many it
// signalled.
func (p *Procs) KillAll() int {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.cmds {
		_ = killProcessGroup(c)
	}
	return len(p.cmds)
}
