package deliver

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/seqctl/seqctl/pkg/engine"
)

// script writes an executable shell script into a temporary directory.
func script(t testing.TB, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "handler.sh")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestExecDelivers(t *testing.T) {
	dir := t.TempDir()
	p := script(t, `cat > "$OUT/stdin"
env | grep -E '^(SEQ_|PARENT_VAR=)' | sort > "$OUT/env"
echo "this goes nowhere"
`)
	t.Setenv("OUT", dir)
	t.Setenv("PARENT_VAR", "inherited")
	fn, err := Exec(ExecConfig{Argv: []string{p}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, ev := testEvent(t, `{"order_id":"o-1","client_id":"client-7"}`)
	if err := fn(ctx, ev); err != nil {
		t.Fatal(err)
	}
	stdin, _ := os.ReadFile(filepath.Join(dir, "stdin"))
	d, _ := engine.DeliveryFrom(ctx)
	want, _ := Marshal(ev, d)
	if string(stdin) != string(want) {
		t.Errorf("stdin = %s\nwant %s", stdin, want)
	}
	env, _ := os.ReadFile(filepath.Join(dir, "env"))
	wantEnv := strings.Join([]string{
		"PARENT_VAR=inherited",
		"SEQ_ATTEMPT=3",
		"SEQ_CATEGORY=order",
		"SEQ_EVENT_ID=" + ev.ID,
		"SEQ_GENERATION=42",
		"SEQ_HANDLER=OrderProjector",
		"SEQ_KEY=client-7",
		"SEQ_LIMIT_GENERATION=", // set, empty: a handler without a limit key
		"SEQ_LIMIT_KEY=",
		"SEQ_LIMIT_SLOT=",
		"SEQ_STREAM=order:client-7",
	}, "\n") + "\n"
	if diff := cmp.Diff(wantEnv, string(env)); diff != "" {
		t.Errorf("environment (-want +got):\n%s", diff)
	}
}

func TestExecFailures(t *testing.T) {
	big := strings.Repeat("0123456789abcdef", 512) // 8 KiB
	tests := []struct {
		name    string
		body    string
		timeout time.Duration
		check   func(t *testing.T, xe *ExitError)
	}{
		{
			name: "exit status and stderr",
			body: "cat >/dev/null\necho 'cannot reach the database' >&2\nexit 3\n",
			check: func(t *testing.T, xe *ExitError) {
				if xe.Error() != "exit status 3: cannot reach the database" || xe.ExitCode != 3 {
					t.Errorf("reason = %q (code %d)", xe, xe.ExitCode)
				}
			},
		},
		{
			name: "no stderr",
			body: "exit 1\n",
			check: func(t *testing.T, xe *ExitError) {
				if xe.Error() != "exit status 1 (no stderr)" {
					t.Errorf("reason = %q", xe)
				}
			},
		},
		{
			name: "the last 4 KiB of stderr",
			body: "printf 'HEAD' >&2\nprintf '" + big + "' >&2\nprintf 'TAIL' >&2\nexit 2\n",
			check: func(t *testing.T, xe *ExitError) {
				if len(xe.Stderr) != StderrTailBytes || !strings.HasSuffix(xe.Stderr, "TAIL") || strings.Contains(xe.Stderr, "HEAD") {
					t.Errorf("stderr tail: %d bytes, suffix %q", len(xe.Stderr), xe.Stderr[max(len(xe.Stderr)-8, 0):])
				}
				// The reason fits what a halt record keeps, exit status first.
				if r := xe.Error(); len(r) != 4096 || !strings.HasPrefix(r, "exit status 2: ") || !strings.HasSuffix(r, "TAIL") {
					t.Errorf("reason: %d bytes, %q...", len(r), r[:20])
				}
			},
		},
		{
			name:    "timeout kills the process",
			body:    "echo 'started' >&2\nsleep 30\n",
			timeout: 200 * time.Millisecond,
			check: func(t *testing.T, xe *ExitError) {
				if !xe.TimedOut || xe.Error() != "killed at the 200ms timeout: started" {
					t.Errorf("reason = %q, timed out = %v", xe, xe.TimedOut)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fn, _ := Exec(ExecConfig{Argv: []string{script(t, tt.body)}, Timeout: tt.timeout})
			ctx, ev := testEvent(t, `{}`)
			start := time.Now()
			err := fn(ctx, ev)
			var xe *ExitError
			if !errors.As(err, &xe) {
				t.Fatalf("err = %v, want an *ExitError", err)
			}
			if time.Since(start) > 5*time.Second {
				t.Errorf("attempt took %v", time.Since(start))
			}
			tt.check(t, xe)
		})
	}
}

// TestExecTimeoutKillsProcessGroup checks that a command's children die with it at the
// timeout, even when they hold stderr open.
func TestExecTimeoutKillsProcessGroup(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("OUT", dir)
	p := script(t, `sleep 30 &
echo $! > "$OUT/child"
wait
`)
	fn, _ := Exec(ExecConfig{Argv: []string{p}, Timeout: 300 * time.Millisecond})
	ctx, ev := testEvent(t, `{}`)
	start := time.Now()
	err := fn(ctx, ev)
	if err == nil || !strings.Contains(err.Error(), "killed at the 300ms timeout") {
		t.Fatalf("err = %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("attempt took %v; the child kept it waiting", d)
	}
	assertDead(t, filepath.Join(dir, "child"))
}

// TestExecTimeoutStartsWithTheProcess checks that the timeout bounds the process, not the
// wait for the process starter: a start delayed past the timeout still lets a quick
// command finish, and a slow command is still killed at its timeout.
func TestExecTimeoutStartsWithTheProcess(t *testing.T) {
	const timeout = 300 * time.Millisecond
	delayed := func(ctx context.Context, c *exec.Cmd) error {
		time.Sleep(2 * timeout) // a queue of starts ahead of this one
		return startCmd(ctx, c)
	}
	for _, tc := range []struct {
		name    string
		body    string
		wantErr string
	}{
		{"quick command after a slow start", "sleep 0.1\n", ""},
		{"slow command after a slow start", "sleep 30\n", "killed at the 300ms timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := newTestExec(t, ExecConfig{Argv: []string{script(t, tc.body)}, Timeout: timeout})
			x.start = delayed
			ctx, ev := testEvent(t, `{}`)
			err := x.deliver(ctx, ev)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("err = %v: the wait for the starter counted against the timeout", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// TestExecCancelledWhileQueuedForStart checks that a start still waiting for the starter
// is abandoned when the engine cancels the attempt.
func TestExecCancelledWhileQueuedForStart(t *testing.T) {
	x := newTestExec(t, ExecConfig{Argv: []string{script(t, "exit 0\n")}})
	x.start = func(ctx context.Context, c *exec.Cmd) error {
		<-ctx.Done() // the starter never gets to it
		return ctx.Err()
	}
	ctx, ev := testEvent(t, `{}`)
	ctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(50*time.Millisecond, cancel)
	err := x.deliver(ctx, ev)
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "before the process started") {
		t.Errorf("err = %v, want a cancellation before the start", err)
	}
}

func newTestExec(t *testing.T, cfg ExecConfig) *execDeliverer {
	t.Helper()
	x, err := newExec(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func TestExecCancelledByEngine(t *testing.T) {
	fn, _ := Exec(ExecConfig{Argv: []string{script(t, "sleep 30\n")}})
	ctx, ev := testEvent(t, `{}`)
	ctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(100*time.Millisecond, cancel)
	err := fn(ctx, ev)
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "lease lost or shutdown") {
		t.Errorf("err = %v, want a cancellation", err)
	}
}

func TestExecProgramMissing(t *testing.T) {
	fn, _ := Exec(ExecConfig{Argv: []string{filepath.Join(t.TempDir(), "absent")}})
	ctx, ev := testEvent(t, `{}`)
	if err := fn(ctx, ev); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("err = %v", err)
	}
}

func TestProcsKillAll(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("OUT", dir)
	p := script(t, `sleep 30 &
echo $! > "$OUT/child"
wait
`)
	procs := &Procs{}
	fn, _ := Exec(ExecConfig{Argv: []string{p}, Timeout: time.Minute, Procs: procs})
	ctx, ev := testEvent(t, `{}`)
	errc := make(chan error, 1)
	go func() { errc <- fn(ctx, ev) }()
	deadline := time.Now().Add(5 * time.Second)
	for procs.Running() == 0 || !fileExists(filepath.Join(dir, "child")) {
		if time.Now().After(deadline) {
			t.Fatal("command did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := procs.KillAll(); n != 1 {
		t.Errorf("KillAll = %d, want 1", n)
	}
	select {
	case err := <-errc:
		if err == nil || !strings.Contains(err.Error(), "signal: killed") {
			t.Errorf("err = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("attempt did not end after KillAll")
	}
	assertDead(t, filepath.Join(dir, "child"))
	if procs.Running() != 0 {
		t.Errorf("Running = %d after the attempt ended", procs.Running())
	}
}

func TestTailBuffer(t *testing.T) {
	b := &tailBuffer{max: 8}
	for _, s := range []string{"abc", "defgh", "ij", "0123456789XY"} {
		_, _ = b.Write([]byte(s))
	}
	if got := string(b.Bytes()); got != "456789XY" {
		t.Errorf("tail = %q", got)
	}
	b = &tailBuffer{max: 8}
	_, _ = b.Write([]byte("abcdef"))
	_, _ = b.Write([]byte("ghij"))
	if got := string(b.Bytes()); got != "cdefghij" {
		t.Errorf("tail = %q", got)
	}
	if got := cleanTail([]byte("\xa9tail ")); got != "tail" {
		t.Errorf("cleanTail = %q", got)
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// assertDead waits for the process whose pid is in file to be gone.
func assertDead(t *testing.T, file string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		// A killed child of the killed shell is reparented and reaped by init; until
		// then it is a zombie, which /proc reports as state Z.
		st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil || strings.Contains(string(st), ") Z ") {
			return
		}
		if syscall.Kill(pid, 0) != nil {
			return
		}
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("child %d of the command survived", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
