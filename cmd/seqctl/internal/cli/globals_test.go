package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/config"
	"github.com/seqctl/seqctl/pkg/engine"
)

func TestRedisOptions(t *testing.T) {
	cfg := &config.Config{File: "d.toml", Broker: config.BrokerConfig{URL: "redis://cfg:6379/2"}}
	tests := []struct {
		name     string
		flag     string
		env      map[string]string
		cfg      *config.Config
		addr     string
		db       int
		password string
		tls      bool
		wantErr  string
	}{
		{name: "default", addr: "127.0.0.1:6379"},
		{name: "config", cfg: cfg, addr: "cfg:6379", db: 2},
		{name: "environment over config", cfg: cfg, env: map[string]string{"SEQCTL_REDIS_URL": "redis://env:1/3"}, addr: "env:1", db: 3},
		{name: "flag over everything", flag: "redis://flag:2/4", cfg: cfg, env: map[string]string{"SEQCTL_REDIS_URL": "redis://env:1/3"}, addr: "flag:2", db: 4},
		{name: "password from the environment", flag: "redis://h:1/0", env: map[string]string{"SEQCTL_REDIS_PASSWORD": "s3cret"}, addr: "h:1", password: "s3cret"},
		{name: "password in the URL wins", flag: "redis://:inurl@h:1/0", env: map[string]string{"SEQCTL_REDIS_PASSWORD": "s3cret"}, addr: "h:1", password: "inurl"},
		{name: "tls", flag: "rediss://h:6380/0", addr: "h:6380", tls: true},
		{name: "bad scheme", flag: "http://h", wantErr: "invalid Redis URL http://h (from --redis-url)"},
		{name: "bad url from the config", cfg: &config.Config{File: "d.toml", Broker: config.BrokerConfig{URL: "nope://x"}}, wantErr: "(from d.toml: broker.url)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := resolveRedis(redisFlags{URL: tt.flag}, tt.cfg, func(k string) string { return tt.env[k] })
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || ExitCode(err) != ExitUsage {
					t.Fatalf("err = %v (exit %d), want a usage error containing %q", err, ExitCode(err), tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			opt := conn.node
			if conn.isCluster() || opt == nil {
				t.Fatalf("cluster mode without asking for it")
			}
			if opt.Addr != tt.addr || opt.DB != tt.db || opt.Password != tt.password || (opt.TLSConfig != nil) != tt.tls {
				t.Errorf("options: addr %s db %d password %q tls %v", opt.Addr, opt.DB, opt.Password, opt.TLSConfig != nil)
			}
		})
	}
}

func TestMaskURL(t *testing.T) {
	for in, want := range map[string]string{
		"redis://:pw@h:1/0":     "redis://:xxxxx@h:1/0",
		"redis://user:pw@h:1/0": "redis://user:xxxxx@h:1/0",
		"redis://h:1/0":         "redis://h:1/0",
	} {
		if got := maskURL(in); got != want {
			t.Errorf("maskURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestExitFor(t *testing.T) {
	tests := []struct {
		err  error
		want int
	}{
		{&admin.NotFoundError{What: "partition", Name: "x"}, ExitNotFound},
		{fmt.Errorf("x: %w", engine.ErrEntryGone), ExitNotFound},
		{&engine.HeadMovedError{Expected: "1-0"}, ExitConflict},
		{engine.ErrFenced, ExitConflict},
		{fmt.Errorf("%w: a:b:c", admin.ErrInvalidStream), ExitUsage},
		{fmt.Errorf("%w: head", engine.ErrNotHalted), ExitFailure},
		{errors.New("boom"), ExitFailure},
		{&config.Error{File: "d.toml"}, ExitUsage},
	}
	for _, tt := range tests {
		if got := ExitCode(exitFor(tt.err)); got != tt.want {
			t.Errorf("exit code of %v = %d, want %d", tt.err, got, tt.want)
		}
	}
}

func TestFmtMS(t *testing.T) {
	for ms, want := range map[int64]string{
		0: "0ms", 850: "850ms", 12345: "12.3s", 245000: "4m05s", 3*3600000 + 20*60000: "3h20m", 2*86400000 + 4*3600000: "2d04h",
	} {
		if got := fmtMS(ms); got != want {
			t.Errorf("fmtMS(%d) = %q, want %q", ms, got, want)
		}
	}
}

// TestConnectAdmin connects for real: the password comes from SEQCTL_REDIS_PASSWORD, a
// wrong one or an unreachable server is an error that names the (masked) URL.
func TestConnectAdmin(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	if err := rdb.ConfigSet(context.Background(), "requirepass", "s3cret").Err(); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"SEQCTL_REDIS_PASSWORD": "s3cret"}
	adm, closeAdm, err := connectAdmin(context.Background(), GlobalOptions{RedisURL: srv.URL}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := adm.ListPartitions(context.Background(), admin.Filter{}); err != nil {
		t.Errorf("list over an authenticated connection: %v", err)
	}
	closeAdm()

	_, _, err = connectAdmin(context.Background(), GlobalOptions{RedisURL: strings.Replace(srv.URL, "redis://", "redis://:wrong@", 1)}, func(string) string { return "" }, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "cannot reach Redis at redis://:xxxxx@") {
		t.Errorf("wrong password: err = %v, want a masked URL", err)
	}

	path := writeConfig(t, "name = \"x\"\n[broker]\nkind = \"kafka\"\n")
	_, _, err = connectAdmin(context.Background(), GlobalOptions{ConfigPath: path, RedisURL: srv.URL}, func(k string) string { return env[k] }, io.Discard)
	if ExitCode(err) != ExitUsage {
		t.Errorf("invalid config: err = %v, want exit 2", err)
	}
}
