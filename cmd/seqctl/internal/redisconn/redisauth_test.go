package redisconn

import (
	"crypto/tls"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/pkg/config"
)

func TestRedisOptionsTLS(t *testing.T) {
	f := redistest.WriteTLSFiles(t, t.TempDir())
	missing := filepath.Join(t.TempDir(), "nope.pem")
	cfg := &config.Config{File: "d.toml", Broker: config.BrokerConfig{URL: "redis://cfg:6379/0",
		TLS: config.TLSConfig{CAFile: f.OtherCA, ServerName: "from-config"}}}
	tests := []struct {
		name       string
		url        string
		flags      config.TLSConfig
		env        map[string]string
		cfg        *config.Config
		wantTLS    bool
		serverName string
		certs      int
		insecure   bool
		wantErr    []string
	}{
		{name: "plain", url: "redis://h:1/0"},
		{name: "rediss alone: system roots, the host as server name", url: "rediss://h:1/0", wantTLS: true, serverName: "h"},
		{name: "a CA turns TLS on for redis://", url: "redis://h:1/0", flags: config.TLSConfig{CAFile: f.CA}, wantTLS: true, serverName: "h"},
		{name: "client certificate from flags", url: "rediss://h:1/0", flags: config.TLSConfig{CAFile: f.CA, CertFile: f.ClientCert, KeyFile: f.ClientKey}, wantTLS: true, serverName: "h", certs: 1},
		{name: "environment", url: "rediss://h:1/0", env: map[string]string{EnvRedisTLSCA: f.CA, EnvRedisTLSCert: f.ClientCert, EnvRedisTLSKey: f.ClientKey, EnvRedisTLSServerName: "env-name"},
			wantTLS: true, serverName: "env-name", certs: 1},
		{name: "config", cfg: cfg, wantTLS: true, serverName: "from-config"},
		{name: "flag over environment over config", cfg: cfg, flags: config.TLSConfig{ServerName: "flag-name"}, env: map[string]string{EnvRedisTLSServerName: "env-name"},
			wantTLS: true, serverName: "flag-name"},
		{name: "insecure from the environment", url: "rediss://h:1/0", env: map[string]string{EnvRedisTLSInsecure: "true"}, wantTLS: true, serverName: "h", insecure: true},
		{name: "missing CA file from a flag", url: "rediss://h:1/0", flags: config.TLSConfig{CAFile: missing}, wantErr: []string{"--redis-tls-ca", missing, "does not exist"}},
		{name: "missing CA file from the environment", url: "rediss://h:1/0", env: map[string]string{EnvRedisTLSCA: missing}, wantErr: []string{"$" + EnvRedisTLSCA, missing}},
		{name: "missing CA file from the config", cfg: &config.Config{File: "d.toml", Broker: config.BrokerConfig{URL: "redis://h:1/0", TLS: config.TLSConfig{CAFile: missing}}},
			wantErr: []string{"d.toml: broker.tls.ca_file", missing}},
		{name: "certificate without key", url: "rediss://h:1/0", flags: config.TLSConfig{CertFile: f.ClientCert}, wantErr: []string{"--redis-tls-key", "cert_file needs"}},
		{name: "bad min version", url: "rediss://h:1/0", env: map[string]string{EnvRedisTLSMinVersion: "1.0"}, wantErr: []string{"$" + EnvRedisTLSMinVersion, `"1.3"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := Resolve(Flags{URL: tt.url, TLS: tt.flags}, tt.cfg, func(k string) string { return tt.env[k] })
			if tt.wantErr != nil {
				checkSettingError(t, err, tt.wantErr...)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc := conn.TLSConfig()
			if (tc != nil) != tt.wantTLS {
				t.Fatalf("TLS %v, want %v", tc != nil, tt.wantTLS)
			}
			if tc == nil {
				return
			}
			if tc.ServerName != tt.serverName || len(tc.Certificates) != tt.certs || tc.InsecureSkipVerify != tt.insecure || tc.MinVersion < tls.VersionTLS12 {
				t.Errorf("tls.Config: server name %q, %d certificates, insecure %v, min version %x", tc.ServerName, len(tc.Certificates), tc.InsecureSkipVerify, tc.MinVersion)
			}
		})
	}
}

func TestWarnInsecureTLS(t *testing.T) {
	var got []string
	WarnInsecureTLS(&tls.Config{InsecureSkipVerify: true}, func(m string) { got = append(got, m) }) //nolint:gosec // the case under test
	WarnInsecureTLS(&tls.Config{}, func(m string) { got = append(got, m) })
	WarnInsecureTLS(nil, func(m string) { got = append(got, m) })
	if len(got) != 1 || !strings.Contains(got[0], "verification is OFF") || !strings.Contains(got[0], "--redis-tls-ca") {
		t.Fatalf("warnings %q, want one naming the CA setting", got)
	}
}

func TestPermissionProblem(t *testing.T) {
	tests := []struct {
		reply string
		want  string
	}{
		{"NOPERM User seqctl-viewer has no permissions to run the 'evalsha' command", "lacks the command +evalsha"},
		{"NOPERM this user has no permissions to run the 'script|load' command", "lacks the command +script|load"},
		{"NOPERM this user has no permissions to access one of the keys used as arguments", "lacks a key pattern"},
		{"NOPERM this user has no permissions to access one of the channels used as arguments", "lacks a channel pattern"},
		{"ERR something else", ""},
	}
	for _, tt := range tests {
		t.Run(tt.reply, func(t *testing.T) {
			got := PermissionProblem(errors.New("head skip: " + tt.reply))
			if tt.want == "" {
				if got != "" {
					t.Fatalf("got %q, want none", got)
				}
				return
			}
			if !strings.Contains(got, tt.want) || !strings.Contains(got, SecurityDoc) || !strings.Contains(got, tt.reply) {
				t.Fatalf("got %q, want %q, the reply and %s", got, tt.want, SecurityDoc)
			}
		})
	}
}

// With TLS 1.3 a Redis that requires a client certificate refuses a client without one
// after the client finished its handshake, so the first command may fail with a reset
// instead of the server's alert. The message still says to give a certificate; the
// probe behind it reads the alert. Against a server that accepts the client, the same
// error gets no such message.
func TestClosedConnAfterHandshakeNamesTheClientCertificate(t *testing.T) {
	srv := redistest.StartWith(t, redistest.Options{TLS: true})
	reset := errors.New("write tcp 127.0.0.1:1->" + srv.Addr + ": write: connection reset by peer")
	conn, err := Resolve(Flags{URL: srv.URL, TLS: config.TLSConfig{CAFile: srv.TLS.CA}}, nil, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	msg := ClosedConnProblem(reset, conn)
	for _, w := range []string{"requires a client certificate", "--redis-tls-cert", "--redis-tls-key", "connection reset by peer"} {
		if !strings.Contains(msg, w) {
			t.Errorf("message %q does not mention %q", msg, w)
		}
	}
	withCert, err := Resolve(Flags{URL: srv.URL, TLS: config.TLSConfig{CAFile: srv.TLS.CA, CertFile: srv.TLS.ClientCert, KeyFile: srv.TLS.ClientKey}}, nil, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if msg := ClosedConnProblem(reset, withCert); msg != "" {
		t.Errorf("with a client certificate: %q, want no message", msg)
	}
	if msg := ClosedConnProblem(errors.New("i/o timeout"), conn); msg != "" {
		t.Errorf("a timeout: %q, want no message", msg)
	}
}
