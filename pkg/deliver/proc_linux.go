//go:build linux

package deliver

import (
	"context"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// ownProcessGroup starts the command as the leader of a new process group, so that the
// command and everything it starts can be killed together, and asks the kernel to kill it
// (SIGKILL) if seqctl dies first: a handler orphaned by a crashed owner must not go on
// applying an event while the next owner handles the same key.
//
// The parent-death signal follows the thread that started the child, so the start runs
// on a locked thread kept for the process's lifetime (see lockedStart).
func ownProcessGroup(c *exec.Cmd) {
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// startCmd starts c on a dedicated OS thread that never exits, since Linux delivers the
// parent-death signal when the thread that forked the child exits, not the process.
// Starts queue for that thread; a start still in the queue is abandoned when ctx ends.
func startCmd(ctx context.Context, c *exec.Cmd) error {
	starterOnce.Do(func() {
		starter = make(chan startReq)
		go starterLoop(starter)
	})
	req := startReq{c: c, done: make(chan error, 1)}
	select {
	case starter <- req:
	case <-ctx.Done():
		return ctx.Err()
	}
	return <-req.done
}

type startReq struct {
	c    *exec.Cmd
	done chan error
}

var (
	starterOnce sync.Once
	starter     chan startReq
)

// starterLoop runs for the life of the process on its own locked thread (tests that check
// for leaked goroutines ignore it by this name).
func starterLoop(ch chan startReq) {
	runtime.LockOSThread() // never unlocked: the thread lives as long as the process
	for r := range ch {
		r.done <- r.c.Start()
	}
}
