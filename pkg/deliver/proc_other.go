//go:build !unix

package deliver

import (
	"context"
	"os/exec"
)

// ownProcessGroup does nothing where process groups are not available.
func ownProcessGroup(*exec.Cmd) {}

// killProcessGroup kills the command's process only.
func killProcessGroup(c *exec.Cmd) error {
	if c.Process == nil {
		return nil
	}
	return c.Process.Kill()
}

// startCmd starts the command.
func startCmd(_ context.Context, c *exec.Cmd) error { return c.Start() }
