package config

import (
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

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
		want []wantProblem
	}{
		{"unknown key", "ca = " + q(f.CA), []wantProblem{{"broker.tls.ca", 3, []string{"unknown key"}}}},
		{"wrong type", "insecure_skip_verify = \"yes\"", []wantProblem{{"broker.tls.insecure_skip_verify", 3, nil}}},
		{"missing CA file", "ca_file = " + q(missing), []wantProblem{{"broker.tls.ca_file", 3, []string{missing, "does not exist"}}}},
		{"CA file not PEM", "ca_file = " + q(notPEM), []wantProblem{{"broker.tls.ca_file", 3, []string{notPEM, "no PEM certificate"}}}},
		{"unreadable CA file", "ca_file = " + q(dir), []wantProblem{{"broker.tls.ca_file", 3, []string{dir, "cannot read"}}}},
		{"cert without key", "cert_file = " + q(f.ClientCert), []wantProblem{{"broker.tls.key_file", 2, []string{"cert_file needs"}}}},
		{"key without cert", "key_file = " + q(f.ClientKey), []wantProblem{{"broker.tls.cert_file", 2, []string{"key_file needs"}}}},
		{"missing key file", "cert_file = " + q(f.ClientCert) + "\nkey_file = " + q(missing), []wantProblem{{"broker.tls.key_file", 4, []string{missing, "does not exist"}}}},
		{"key of another certificate", "cert_file = " + q(f.ClientCert) + "\nkey_file = " + q(f.ServerKey), []wantProblem{{"broker.tls.key_file", 4, []string{f.ServerKey, "does not fit"}}}},
		{"bad min_version", "min_version = \"1.1\"", []wantProblem{{"broker.tls.min_version", 3, []string{`"1.2"`, `"1.3"`}}}},
		{"empty server_name", "server_name = \"\"", []wantProblem{{"broker.tls.server_name", 3, []string{"is empty"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := problemsOf(t, "name = \"x\"\n[broker.tls]\n"+tt.body+"\n")
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

// ApplyClusterTLS configures a cluster client as ApplyTLS does one node: the same
// settings give the same tls.Config, with the URL's first host as the server name.
func TestApplyClusterTLS(t *testing.T) {
	f := redistest.WriteTLSFiles(t, t.TempDir())
	tests := []struct {
		name       string
		nodeURL    string
		clusterURL string
		c          TLSConfig
		wantTLS    bool
		serverName string
		certs      int
		wantErr    string
	}{
		{name: "plain, no settings", nodeURL: "redis://h1:7000/0", clusterURL: "redis://h1:7000?addr=h2:7001"},
		{name: "rediss alone keeps go-redis's config", nodeURL: "rediss://h1:7000/0", clusterURL: "rediss://h1:7000?addr=h2:7001", wantTLS: true, serverName: "h1"},
		{name: "a CA turns TLS on for redis://", nodeURL: "redis://h1:7000/0", clusterURL: "redis://h1:7000?addr=h2:7001", c: TLSConfig{CAFile: f.CA}, wantTLS: true, serverName: "h1"},
		{name: "server name and client certificate", nodeURL: "rediss://h1:7000/0", clusterURL: "rediss://h1:7000?addr=h2:7001",
			c: TLSConfig{CAFile: f.CA, CertFile: f.ClientCert, KeyFile: f.ClientKey, ServerName: "redis.internal"}, wantTLS: true, serverName: "redis.internal", certs: 1},
		{name: "bad setting", nodeURL: "rediss://h1:7000/0", clusterURL: "rediss://h1:7000?addr=h2:7001", c: TLSConfig{MinVersion: "1.0"}, wantErr: TLSSettingMinVersion},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			node, err := redis.ParseURL(tt.nodeURL)
			if err != nil {
				t.Fatal(err)
			}
			cluster, err := ParseClusterURL(tt.clusterURL)
			if err != nil {
				t.Fatal(err)
			}
			nerr, cerr := tt.c.ApplyTLS(node), tt.c.ApplyClusterTLS(cluster)
			if tt.wantErr != "" {
				var te *TLSError
				if !errors.As(cerr, &te) || te.Setting != tt.wantErr || fmt.Sprint(nerr) != fmt.Sprint(cerr) {
					t.Fatalf("cluster err %v, node err %v; want the same *TLSError for %s", cerr, nerr, tt.wantErr)
				}
				return
			}
			if nerr != nil || cerr != nil {
				t.Fatalf("node err %v, cluster err %v", nerr, cerr)
			}
			tc := cluster.TLSConfig
			if (tc != nil) != tt.wantTLS || (node.TLSConfig != nil) != tt.wantTLS {
				t.Fatalf("cluster TLS %v, node TLS %v, want %v", tc != nil, node.TLSConfig != nil, tt.wantTLS)
			}
			if tc == nil {
				return
			}
			if tc.ServerName != tt.serverName || len(tc.Certificates) != tt.certs || (tt.c.CAFile != "") != (tc.RootCAs != nil) {
				t.Errorf("cluster tls.Config: server name %q, %d certificates, roots %v", tc.ServerName, len(tc.Certificates), tc.RootCAs != nil)
			}
			n := node.TLSConfig
			if n.ServerName != tc.ServerName || n.MinVersion != tc.MinVersion || len(n.Certificates) != len(tc.Certificates) || (n.RootCAs != nil) != (tc.RootCAs != nil) {
				t.Errorf("node and cluster differ: node (%q, %x, %d certs) cluster (%q, %x, %d certs)",
					n.ServerName, n.MinVersion, len(n.Certificates), tc.ServerName, tc.MinVersion, len(tc.Certificates))
			}
		})
	}
}
