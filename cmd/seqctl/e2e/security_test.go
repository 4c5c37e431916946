package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/config"
	"github.com/seqctl/seqctl/pkg/engine"
)

// seqctlCmd runs seqctl with args (SEQCTL_REDIS_URL cleared) and returns its combined
// output, exit code and how long it took.
func seqctlCmd(t *testing.T, env []string, args ...string) (string, int, time.Duration) {
	t.Helper()
	return seqctlCmdWithin(t, 15*time.Second, env, args...)
}

// seqctlCmdWithin is seqctlCmd that fails the test when the command has not exited
// within timeout.
func seqctlCmdWithin(t *testing.T, timeout time.Duration, env []string, args ...string) (string, int, time.Duration) {
	t.Helper()
	cmd := exec.Command(seqctlBin, args...)
	cmd.Env = append(append(os.Environ(), config.EnvRedisURL+"=", "E2E_SECRET="+e2eSecret), env...)
	start := time.Now()
	out, err := runWithTimeout(cmd, timeout)
	took := time.Since(start)
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("seqctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out, code, took
}

// waitHalt waits until Stepper's partition of key halts and returns its record.
func (f *fixture) waitHalt(key string) *engine.HaltRecord {
	f.t.Helper()
	broker := engine.NewRedisBroker(f.rdb)
	var halt *engine.HaltRecord
	testkit.WaitFor(f.t, 15*time.Second, "partition "+key+" to halt", func() bool {
		var err error
		halt, err = broker.Halt(context.Background(), engine.HeadRef{Group: "Stepper", Category: "step", Key: key})
		if err != nil {
			f.t.Fatal(err)
		}
		return halt != nil
	})
	return halt
}

// TestTLSClientCertificates: against a TLS-only redis-server with a private CA that
// requires client certificates, 'seqctl run' (TLS from [broker.tls]), publish,
// partitions list and head skip (TLS from the flags) work; without the CA, with the
// wrong CA or without the client certificate each fails with a message naming the
// setting to fix, and run exits 1 at once.
func TestTLSClientCertificates(t *testing.T) {
	s, sinkURL := startSink(t)
	f := newFixtureWith(t, "http.domain.toml", map[string]string{"URL": sinkURL}, redistest.Options{TLS: true})
	tf := f.srv.TLS
	withTLS := []string{"--redis-tls-ca", tf.CA, "--redis-tls-cert", tf.ClientCert, "--redis-tls-key", tf.ClientKey}

	// The worker takes its TLS settings from the config.
	base, err := os.ReadFile(f.config)
	if err != nil {
		t.Fatal(err)
	}
	tlsConfig := filepath.Join(f.dir, "tls.domain.toml")
	section := "\n[broker.tls]\nca_file = %q\ncert_file = %q\nkey_file = %q\n"
	if err := os.WriteFile(tlsConfig, []byte(string(base)+fmt.Sprintf(section, tf.CA, tf.ClientCert, tf.ClientKey)), 0o644); err != nil {
		t.Fatal(err)
	}
	a := f.run("a", []string{"E2E_SECRET=" + e2eSecret}, "--config", tlsConfig)
	a.waitReady(10 * time.Second)

	f.global = withTLS
	keys := keyNames("t", 3)
	f.publish(append(steps(keys, 1, 5), step{"poison-1", 1}))
	testkit.WaitFor(t, 15*time.Second, "every event to be delivered", func() bool {
		log, _, _ := s.snapshot()
		return complete(log, keys, 5)
	})
	halt := f.waitHalt("poison-1")

	out, code, _ := seqctlCmd(t, nil, append([]string{"partitions", "list", "--config", f.config, "--redis-url", f.srv.URL, "-o", "json"}, withTLS...)...)
	if code != 0 || !strings.Contains(out, "step:poison-1") {
		t.Fatalf("partitions list over TLS: exit %d\n%s", code, out)
	}
	out, code, _ = seqctlCmd(t, nil, append([]string{"head", "skip", "step:poison-1", "--handler", "Stepper", "--expect-id", halt.EntryID, "--yes",
		"--config", f.config, "--redis-url", f.srv.URL}, withTLS...)...)
	if code != 0 {
		t.Fatalf("head skip over TLS: exit %d\n%s", code, out)
	}
	testkit.WaitFor(t, 10*time.Second, "the skipped partition to resume", func() bool {
		h, err := engine.NewRedisBroker(f.rdb).Halt(context.Background(), engine.HeadRef{Group: "Stepper", Category: "step", Key: "poison-1"})
		return err == nil && h == nil
	})

	// Verification off: it works, and says how unsafe that is on every start.
	out, code, _ = seqctlCmd(t, []string{"SEQCTL_REDIS_TLS_INSECURE_SKIP_VERIFY=true"}, "partitions", "list", "--config", f.config, "--redis-url", f.srv.URL,
		"--redis-tls-cert", tf.ClientCert, "--redis-tls-key", tf.ClientKey)
	if code != 0 || !strings.Contains(out, "verification is OFF") {
		t.Errorf("partitions list without verification: exit %d, want 0 with a warning:\n%s", code, out)
	}

	// Each command, without the settings it needs.
	commands := []struct {
		name string
		args []string
	}{
		{"run", []string{"run", "--instance-id", "x"}},
		{"publish", []string{"publish", "--event", "Step", "--data", `{"key":"t0","seq":99}`}},
		{"partitions list", []string{"partitions", "list"}},
		{"head skip", []string{"head", "skip", "step:poison-1", "--handler", "Stepper", "--expect-id", "1-0", "--yes"}},
	}
	plain := "redis://" + f.srv.Addr + "/0"
	cases := []struct {
		name string
		url  string
		tls  []string
		want []string
	}{
		{"plain URL", plain, nil, []string{"speaks TLS", "rediss://", "--redis-tls-ca"}},
		{"no CA", f.srv.URL, nil, []string{"not signed by a CA seqctl trusts", "--redis-tls-ca"}},
		{"wrong CA", f.srv.URL, []string{"--redis-tls-ca", tf.OtherCA, "--redis-tls-cert", tf.ClientCert, "--redis-tls-key", tf.ClientKey}, []string{"not signed by a CA seqctl trusts", "--redis-tls-ca"}},
		{"no client certificate", f.srv.URL, []string{"--redis-tls-ca", tf.CA}, []string{"requires a client certificate", "--redis-tls-cert", "--redis-tls-key"}},
	}
	// The cases mostly wait on go-redis's dial backoff: run them side by side (the group
	// returns when all are done).
	t.Run("failures", func(t *testing.T) {
		for _, c := range cases {
			for _, cmd := range commands {
				t.Run(c.name+"/"+cmd.name, func(t *testing.T) {
					t.Parallel()
					args := append(append(append([]string{}, cmd.args...), "--config", f.config, "--redis-url", c.url), c.tls...)
					out, code, took := seqctlCmd(t, nil, args...)
					checkQuickExit1(t, out, code, took, c.want)
				})
			}
		}
	})

	a.stop(syscall.SIGTERM, 10*time.Second)
}

// aclUsers returns the ACL SETUSER lines of docs/security.md for the category step, and
// the password of each user (the placeholder in the line).
func aclUsers(t *testing.T) (lines []string, passwords map[string]string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "security.md"))
	if err != nil {
		t.Fatal(err)
	}
	passwords = map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, "ACL SETUSER ") {
			continue
		}
		l = strings.ReplaceAll(l, "order", "step")
		fields := strings.Fields(l)
		for _, fl := range fields {
			if strings.HasPrefix(fl, ">") {
				passwords[fields[2]] = fl[1:]
			}
		}
		lines = append(lines, l)
	}
	for _, u := range []string{"seqctl-worker", "seqctl-publisher", "seqctl-viewer", "seqctl-operator"} {
		if _, ok := passwords[u]; !ok {
			t.Fatalf("docs/security.md has no ACL SETUSER line with a password for %s", u)
		}
	}
	return lines, passwords
}

// TestACLUsersGuarantees: with the ACL users of docs/security.md, two workers keep
// per-key order across a SIGKILL, the poison key halts, a read-only operator lists the
// partitions but its head skip fails with the NOPERM message, an acting operator's skip
// resumes the partition, and the audit log names the Redis user.
func TestACLUsersGuarantees(t *testing.T) {
	lines, pw := aclUsers(t)
	s, sinkURL := startSink(t)
	f := newFixtureWith(t, "http.domain.toml", map[string]string{"URL": sinkURL}, redistest.Options{Users: lines})
	url := func(user string) string { return f.srv.UserURL(user, pw[user]) }
	t.Cleanup(func() {
		if t.Failed() {
			log, _ := f.rdb.Do(context.Background(), "ACL", "LOG").Slice()
			t.Logf("ACL LOG: %v", log)
		}
	})
	f.publishURL = url("seqctl-publisher")
	orderCrashAndHalt(t, f, s, []string{"--redis-url", url("seqctl-worker")}, func(halt *engine.HaltRecord) {
		// The viewer sees the halt, and may not skip it.
		out, code, _ := seqctlCmd(t, nil, "partitions", "list", "--config", f.config, "--redis-url", url("seqctl-viewer"), "-o", "json")
		if code != 0 || !strings.Contains(out, "step:poison-1") {
			t.Fatalf("partitions list as the viewer: exit %d\n%s", code, out)
		}
		out, code, _ = seqctlCmd(t, nil, "head", "skip", "step:poison-1", "--handler", "Stepper", "--expect-id", halt.EntryID, "--yes",
			"--config", f.config, "--redis-url", url("seqctl-viewer"))
		if code != 1 || !strings.Contains(out, "NOPERM") || !strings.Contains(out, "docs/security.md") || !strings.Contains(out, "lacks") {
			t.Fatalf("head skip as the viewer: exit %d, want 1 with the NOPERM message:\n%s", code, out)
		}
		t.Logf("viewer's head skip: %s", lastLine(out))

		// The operator skips; the worker resumes and halts on the next poison entry.
		out, code, _ = seqctlCmd(t, nil, "head", "skip", "step:poison-1", "--handler", "Stepper", "--expect-id", halt.EntryID, "--yes",
			"--config", f.config, "--redis-url", url("seqctl-operator"))
		if code != 0 {
			t.Fatalf("head skip as the operator: exit %d\n%s", code, out)
		}
		var next *engine.HaltRecord
		testkit.WaitFor(t, 15*time.Second, "the worker to resume past the skipped entry", func() bool {
			next = f.waitHalt("poison-1")
			return next.EntryID != halt.EntryID
		})

		// What 'top --readonly' reads, as the viewer.
		viewer := admin.New(redisClient(t, url("seqctl-viewer")), admin.Options{})
		ctx := context.Background()
		if _, err := viewer.ListPartitions(ctx, admin.Filter{}); err != nil {
			t.Errorf("ListPartitions as the viewer: %v", err)
		}
		if _, err := viewer.Instances(ctx); err != nil {
			t.Errorf("Instances as the viewer: %v", err)
		}
		if _, err := viewer.Inspect(ctx, "step:poison-1", "Stepper"); err != nil {
			t.Errorf("Inspect as the viewer: %v", err)
		}
		if _, err := viewer.DLQs(ctx); err != nil {
			t.Errorf("DLQs as the viewer: %v", err)
		}

		// The operator moves the next head to the DLQ and replays it; the worker takes
		// the replayed entry (and halts on it again).
		out, code, _ = seqctlCmd(t, nil, "head", "dlq", "step:poison-1", "--handler", "Stepper", "--expect-id", next.EntryID, "--yes",
			"--config", f.config, "--redis-url", url("seqctl-operator"))
		if code != 0 {
			t.Fatalf("head dlq as the operator: exit %d\n%s", code, out)
		}
		out, code, _ = seqctlCmd(t, nil, "dlq", "list", "step:poison-1", "--redis-url", url("seqctl-viewer"), "-o", "json")
		var dlq []struct{ ID string }
		if err := json.Unmarshal([]byte(out), &dlq); code != 0 || err != nil || len(dlq) != 1 {
			t.Fatalf("dlq list as the viewer: exit %d, %v, want one entry\n%s", code, err, out)
		}
		out, code, _ = seqctlCmd(t, nil, "dlq", "replay", "step:poison-1", "--id", dlq[0].ID, "--yes", "--config", f.config, "--redis-url", url("seqctl-operator"))
		if code != 0 {
			t.Fatalf("dlq replay as the operator: exit %d\n%s", code, out)
		}
		testkit.WaitFor(t, 15*time.Second, "the worker to take the replayed entry", func() bool {
			h := f.waitHalt("poison-1")
			return h.EntryID != next.EntryID
		})

		// The operator pauses a key and resumes it (no lease needed; its owner is told).
		for _, verb := range []string{"pause", "resume"} {
			out, code, _ = seqctlCmd(t, nil, "partitions", verb, "step:quiet-1", "--handler", "Stepper", "--reason", "acl check", "--yes",
				"--config", f.config, "--redis-url", url("seqctl-operator"))
			if code != 0 {
				t.Fatalf("partitions %s as the operator: exit %d\n%s", verb, code, out)
			}
		}

		out, code, _ = seqctlCmd(t, nil, "audit", "--redis-url", url("seqctl-viewer"), "-o", "json")
		var entries []struct {
			User, Command, Outcome string
			RedisUser              string `json:"redis_user"`
		}
		if err := json.Unmarshal([]byte(out), &entries); code != 0 || err != nil {
			t.Fatalf("audit as the viewer: exit %d, %v\n%s", code, err, out)
		}
		var users []string
		for _, e := range entries {
			users = append(users, e.Command+" "+e.Outcome+" by "+e.User+" as "+e.RedisUser)
		}
		want := []string{"head skip ok by OS as seqctl-operator", "head dlq ok by OS as seqctl-operator", "dlq replay ok by OS as seqctl-operator",
			"partitions pause ok by OS as seqctl-operator", "partitions resume ok by OS as seqctl-operator"}
		for _, w := range want {
			found := false
			for _, e := range entries {
				found = found || (e.Command+" "+e.Outcome+" by OS as "+e.RedisUser == w && e.User != "")
			}
			if !found {
				t.Errorf("the audit log has no %q (OS user set): %q", w, users)
			}
		}
	})

	// With every worker stopped, the operator retires the handler's group (the viewer
	// lists it first).
	out, code, _ := seqctlCmd(t, nil, "groups", "list", "--category", "step", "--redis-url", url("seqctl-viewer"))
	if code != 0 || !strings.Contains(out, "Stepper") {
		t.Fatalf("groups list as the viewer: exit %d\n%s", code, out)
	}
	testkit.WaitFor(t, 10*time.Second, "the operator to retire the group", func() bool {
		out, code, _ = seqctlCmd(t, nil, "groups", "remove", "Stepper", "--category", "step", "--yes", "--redis-url", url("seqctl-operator"))
		if code != 0 && code != 4 { // 4 while a lease of a stopped worker lives on
			t.Fatalf("groups remove as the operator: exit %d\n%s", code, out)
		}
		return code == 0
	})

	// A worker started as the viewer stops at once, naming what the user lacks.
	var took time.Duration
	out, code, took = seqctlCmd(t, nil, "run", "--instance-id", "v", "--config", f.config, "--redis-url", url("seqctl-viewer"))
	if code != 1 || took > 5*time.Second || !strings.Contains(out, "lacks") || !strings.Contains(out, "docs/security.md") {
		t.Errorf("run as the viewer: exit %d after %v, want 1 within 5s with the NOPERM message:\n%s", code, took, out)
	}
	t.Logf("run as the viewer: exit %d after %v: %s", code, took.Round(time.Millisecond), lastLine(out))

	// Nothing but the viewer's commands were refused: no background path of the workers
	// (renewal, reclaim, trimming, release at shutdown) lacks a permission.
	log, err := f.rdb.Do(context.Background(), "ACL", "LOG").Slice()
	if err != nil {
		t.Fatal(err)
	}
	viewer := 0
	for _, e := range log {
		m, ok := e.(map[any]any)
		switch {
		case !ok:
			t.Fatalf("ACL LOG entry %T, want a map", e)
		case m["username"] == "seqctl-viewer":
			viewer++
		case m["object"] == "client|setinfo" || m["object"] == "client|maint_notifications":
			// Newer Redis: the client library's optional connection handshake, ignored
			// when refused (see docs/security.md).
		case m["username"] == "seqctl-worker" && m["object"] == "config|get":
			// A worker whose Redis sends no keyspace notifications tries once per start to
			// turn them on; the least-privilege list leaves CONFIG out (docs/security.md).
			if n, _ := m["count"].(int64); n > 2 {
				t.Errorf("the workers tried CONFIG GET %d times, want once per start (2)", n)
			}
		default:
			t.Errorf("refused for %v: %v on %v (%v, %v)", m["username"], m["reason"], m["object"], m["context"], m["client-info"])
		}
	}
	if viewer == 0 {
		t.Error("ACL LOG has no refusal for the viewer's head skip")
	}
}

// redisClient connects to url, closed at cleanup.
func redisClient(t *testing.T, url string) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}
