//go:build unix && !linux

package deliver

import (
	"context"
	"os/exec"
	"syscall"
)

// ownProcessGroup starts the command as the leader of a new process group, so that the
// command and everything it starts can be killed together.
func ownProcessGroup(c *exec.Cmd) {
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// killProcessGroup kills the command's process group (SIGKILL).
func killProcessGroup(c *exec.Cmd) error {
	if c.Process == nil {
		return nil
	}
	if err := syscall.Kill(-c.Process.Pid, syscall.SIGKILL); err != nil {
		return c.Process.Kill()
	}
	return nil
}

// startCmd starts the command.
func startCmd(_ context.Context, c *exec.Cmd) error { return c.Start() }
