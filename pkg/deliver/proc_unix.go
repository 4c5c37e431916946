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

// startCmd starts the command.
func startCmd(_ context.Context, c *exec.Cmd) error { return c.Start() }
