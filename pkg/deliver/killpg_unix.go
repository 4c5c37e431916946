//go:build unix

package deliver

import (
	"os/exec"
	"syscall"
)

// killProcessGroup kills the command's process group (SIGKILL), or the command alone when
// the group cannot be signalled.
func killProcessGroup(c *exec.Cmd) error {
	if c.Process == nil {
		return nil
	}
	if err := syscall.Kill(-c.Process.Pid, syscall.SIGKILL); err != nil {
		return c.Process.Kill()
	}
	return nil
}
