package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/pkg/config"
	"github.com/seqctl/seqctl/pkg/redact"
)

// topDomain is a domain whose only Redis is the one named by its [broker] url.
const topDomain = `name = "shop"

[broker]
kind = "redis"
url = "@URL@"

[[events]]
name = "OrderPlaced"
category = "order"
fields = ["client_id"]

[[handlers]]
name = "Projector"
part_of = "order"
handles = ["OrderPlaced"]
sequential_by = "client_id"
`

// TestTopHeaderShowsConfiguredRedis runs 'seqctl top --config FILE' in a real terminal
// (a tmux pane of 120x40): the header names the Redis of the config's [broker] url, the
// one whose partitions the table shows, with its password masked.
func TestTopHeaderShowsConfiguredRedis(t *testing.T) {
	term := startTmux(t, 120, 40)
	const password = "top-secret-pw"
	srv := redistest.StartWith(t, redistest.Options{Users: []string{"operator on >" + password + " ~* &* +@all"}})
	url := srv.UserURL("operator", password)
	dir := t.TempDir()
	configPath := filepath.Join(dir, "domain.toml")
	if err := os.WriteFile(configPath, []byte(strings.ReplaceAll(topDomain, "@URL@", url)), 0o644); err != nil {
		t.Fatal(err)
	}
	// A partition that exists only in that Redis, so the table shows where top reads.
	if out, code, _ := seqctlCmd(t, nil, "publish", "--config", configPath, "--event", "OrderPlaced",
		"--data", `{"client_id":"client-only-here"}`); code != 0 {
		t.Fatalf("seqctl publish: exit %d\n%s", code, out)
	}

	term.run(t, "env", "-u", config.EnvRedisURL, "-u", "SEQCTL_REDIS_CLUSTER", "-u", "SEQCTL_REDIS_PASSWORD",
		seqctlBin, "top", "--config", configPath, "--refresh", "200ms")
	screen := term.waitFor(t, 30*time.Second, "client-only-here")
	header, _, _ := strings.Cut(screen, "\n")
	if want := "redis " + redact.URL(url) + " "; !strings.Contains(header, want) {
		t.Errorf("the header does not name the Redis top reads (want %q):\n%s", want, screen)
	}
	if strings.Contains(screen, password) {
		t.Errorf("the screen shows the password:\n%s", screen)
	}
}

// tmuxTerm is one tmux server of the test's own (its own socket and configuration), with
// a window of a fixed size.
type tmuxTerm struct {
	bin, sock, conf string
	w, h            int
}

// startTmux starts nothing yet: it checks for tmux (the test is skipped without it) and
// arranges for the test's tmux server to be killed at cleanup.
func startTmux(t *testing.T, w, h int) *tmuxTerm {
	t.Helper()
	bin, err := exec.LookPath("tmux")
	if err != nil {
		t.Skip("tmux not found on PATH: this test runs seqctl top in a real terminal (Debian: apt-get install tmux)")
	}
	dir, err := os.MkdirTemp("", "seqctl-tmux-") // short: a socket path is limited to about 100 bytes
	if err != nil {
		t.Fatal(err)
	}
	tt := &tmuxTerm{bin: bin, sock: filepath.Join(dir, "sock"), conf: filepath.Join(dir, "tmux.conf"), w: w, h: h}
	// No status line (the pane is the whole window); keep the pane when the program
	// exits, so its last screen (an error, say) can be read.
	if err := os.WriteFile(tt.conf, []byte("set -g status off\nset -g remain-on-exit on\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = tt.cmd("kill-server").Run()
		os.RemoveAll(dir)
	})
	return tt
}

func (tt *tmuxTerm) cmd(args ...string) *exec.Cmd {
	c := exec.Command(tt.bin, append([]string{"-S", tt.sock, "-f", tt.conf}, args...)...)
	c.Env = append(os.Environ(), "TMUX=")
	return c
}

// run starts argv in a new detached session of the test's size.
func (tt *tmuxTerm) run(t *testing.T, argv ...string) {
	t.Helper()
	args := append([]string{"new-session", "-d", "-s", "t", "-x", strconv.Itoa(tt.w), "-y", strconv.Itoa(tt.h), "--"}, argv...)
	if out, err := tt.cmd(args...).CombinedOutput(); err != nil {
		t.Fatalf("tmux new-session: %v\n%s", err, out)
	}
}

// screen returns the visible text of the pane.
func (tt *tmuxTerm) screen(t *testing.T) string {
	t.Helper()
	out, err := tt.cmd("capture-pane", "-p", "-t", "t").CombinedOutput()
	if err != nil {
		t.Fatalf("tmux capture-pane: %v\n%s", err, out)
	}
	return string(out)
}

// waitFor polls the screen until it shows text, and returns it.
func (tt *tmuxTerm) waitFor(t *testing.T, timeout time.Duration, text string) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s := tt.screen(t)
		if strings.Contains(s, text) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("the screen did not show %q within %v:\n%s", text, timeout, s)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
