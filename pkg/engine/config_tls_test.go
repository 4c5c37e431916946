package engine

import (
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/seqctl/seqctl/internal/redistest"
)

func TestParseConfigBrokerTLS(t *testing.T) {
	dir := t.TempDir()
	f := redistest.WriteTLSFiles(t, dir)
	missing := filepath.Join(dir, "nope.pem")
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	q := func(s string) string { return fmt.Sprintf("%q", s) }

	t.Run("valid", func(t *testing.T) {
		cfg, err := parseConfig("d.toml", []byte("name = \"x\"\n[broker.tls]\nca_file = "+q(f.CA)+"\ncert_file = "+q(f.ClientCert)+
			"\nkey_file = "+q(f.ClientKey)+"\nserver_name = \"redis.internal\"\nmin_version = \"1.3\"\n"), func(string) string { return "" })
		if err != nil {
			t.Fatal(err)
		}
		want := TLSConfig{CAFile: f.CA, CertFile: f.ClientCert, KeyFile: f.ClientKey, ServerName: "redis.internal", MinVersion: "1.3"}
		if diff := cmp.Diff(want, cfg.Broker.TLS); diff != "" {
			t.Fatalf("broker.tls (-want +got):\n%s", diff)
		}
		tc, err := cfg.Broker.TLS.ClientConfig("host")
		if err != nil {
			t.Fatal(err)
		}
		if tc.ServerName != "redis.internal" || tc.MinVersion != tls.VersionTLS13 || tc.RootCAs == nil || len(tc.Certificates) != 1 {
			t.Fatalf("tls.Config: server name %q, min version %x, roots %v, %d certificates", tc.ServerName, tc.MinVersion, tc.RootCAs != nil, len(tc.Certificates))
		}
	})

	tests := []struct {
		name string
		body string
		want []cfgWantProblem
	}{
		{"unknown key", "ca = " + q(f.CA), []cfgWantProblem{{"broker.tls.ca", 3, []string{"unknown key"}}}},
		{"wrong type", "insecure_skip_verify = \"yes\"", []cfgWantProblem{{"broker.tls.insecure_skip_verify", 3, nil}}},
		{"missing CA file", "ca_file = " + q(missing), []cfgWantProblem{{"broker.tls.ca_file", 3, []string{missing, "does not exist"}}}},
		{"CA file not PEM", "ca_file = " + q(notPEM), []cfgWantProblem{{"broker.tls.ca_file", 3, []string{notPEM, "no PEM certificate"}}}},
		{"unreadable CA file", "ca_file = " + q(dir), []cfgWantProblem{{"broker.tls.ca_file", 3, []string{dir, "cannot read"}}}},
		{"cert without key", "cert_file = " + q(f.ClientCert), []cfgWantProblem{{"broker.tls.key_file", 2, []string{"cert_file needs"}}}},
		{"key without cert", "key_file = " + q(f.ClientKey), []cfgWantProblem{{"broker.tls.cert_file", 2, []string{"key_file needs"}}}},
		{"missing key file", "cert_file = " + q(f.ClientCert) + "\nkey_file = " + q(missing), []cfgWantProblem{{"broker.tls.key_file", 4, []string{missing, "does not exist"}}}},
		{"key of another certificate", "cert_file = " + q(f.ClientCert) + "\nkey_file = " + q(f.ServerKey), []cfgWantProblem{{"broker.tls.key_file", 4, []string{f.ServerKey, "does not fit"}}}},
		{"bad min_version", "min_version = \"1.1\"", []cfgWantProblem{{"broker.tls.min_version", 3, []string{`"1.2"`, `"1.3"`}}}},
		{"empty server_name", "server_name = \"\"", []cfgWantProblem{{"broker.tls.server_name", 3, []string{"is empty"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := cfgProblemsOf(t, "name = \"x\"\n[broker.tls]\n"+tt.body+"\n")
			var gotPaths, wantPaths []string
			for _, g := range got {
				gotPaths = append(gotPaths, fmt.Sprintf("%s:%d", g.Path, g.Line))
			}
			for _, w := range tt.want {
				wantPaths = append(wantPaths, fmt.Sprintf("%s:%d", w.Path, w.Line))
			}
			if diff := cmp.Diff(wantPaths, gotPaths); diff != "" {
				t.Fatalf("problems (-want +got):\n%s\n%v", diff, got)
			}
			for i, w := range tt.want {
				for _, frag := range w.Contains {
					if !strings.Contains(got[i].Message, frag) {
						t.Errorf("problem %q does not contain %q", got[i].Message, frag)
					}
				}
			}
		})
	}
}
