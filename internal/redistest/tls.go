package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TLSFiles are the PEM files of a TLS server started with Options.TLS, all in the
// server's directory: a throwaway CA, the server's certificate (for 127.0.0.1 and
// localhost) and a client certificate the server accepts. OtherCA is a second,
// unrelated CA, for tests of a wrong CA.
type TLSFiles struct {
	CA         string // the CA certificate that signed both certificates
	ServerCert string
	ServerKey  string
	ClientCert string // a client certificate signed by CA
	ClientKey  string
	OtherCA    string // a CA that signed nothing the server uses
}

// ClientConfig returns a tls.Config that trusts CA and presents the client certificate.
func (f *TLSFiles) ClientConfig(tb testing.TB) *tls.Config {
	tb.Helper()
	pem, err := os.ReadFile(f.CA)
	if err != nil {
		tb.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	cert, err := tls.LoadX509KeyPair(f.ClientCert, f.ClientKey)
	if err != nil {
		tb.Fatal(err)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, ServerName: "127.0.0.1"}
}

// tlsValidity is how long the generated certificates are valid: long enough for any
// test, short enough that a leaked one is worthless.
const tlsValidity = time.Hour

// WriteTLSFiles generates a CA, server and client certificates (ECDSA P-256, valid for an
// hour) in dir, for tests that need the files without a server.
func WriteTLSFiles(tb testing.TB, dir string) *TLSFiles {
	tb.Helper()
	f := &TLSFiles{
		CA:         filepath.Join(dir, "ca.pem"),
		ServerCert: filepath.Join(dir, "server.pem"), ServerKey: filepath.Join(dir, "server-key.pem"),
		ClientCert: filepath.Join(dir, "client.pem"), ClientKey: filepath.Join(dir, "client-key.pem"),
		OtherCA: filepath.Join(dir, "other-ca.pem"),
	}
	ca, caKey := newCert(tb, "seqctl test CA", nil, nil, func(c *x509.Certificate) {
		c.IsCA, c.BasicConstraintsValid = true, true
		c.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign
	})
	writePEM(tb, f.CA, "CERTIFICATE", ca.Raw)
	srv, srvKey := newCert(tb, "redis-server", ca, caKey, func(c *x509.Certificate) {
		c.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		c.DNSNames = []string{"localhost"}
		c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		c.KeyUsage = x509.KeyUsageDigitalSignature
	})
	writePEM(tb, f.ServerCert, "CERTIFICATE", srv.Raw)
	writeKey(tb, f.ServerKey, srvKey)
	cli, cliKey := newCert(tb, "seqctl client", ca, caKey, func(c *x509.Certificate) {
		c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		c.KeyUsage = x509.KeyUsageDigitalSignature
	})
	writePEM(tb, f.ClientCert, "CERTIFICATE", cli.Raw)
	writeKey(tb, f.ClientKey, cliKey)
	other, _ := newCert(tb, "unrelated CA", nil, nil, func(c *x509.Certificate) {
		c.IsCA, c.BasicConstraintsValid = true, true
		c.KeyUsage = x509.KeyUsageCertSign
	})
	writePEM(tb, f.OtherCA, "CERTIFICATE", other.Raw)
	return f
}

// newCert makes a certificate for cn, signed by parent (self-signed when parent is nil).
func newCert(tb testing.TB, cn string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, edit func(*x509.Certificate)) (*x509.Certificate, *ecdsa.PrivateKey) {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		tb.Fatal(err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(tlsValidity),
	}
	edit(tmpl)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		tb.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	return cert, key
}

func writeKey(tb testing.TB, path string, key *ecdsa.PrivateKey) {
	tb.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	writePEM(tb, path, "PRIVATE KEY", der)
}

func writePEM(tb testing.TB, path, typ string, der []byte) {
	tb.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		tb.Fatal(err)
	}
}

// tlsArgs are the redis-server arguments of a TLS-only server on port: no plain port,
// client certificates required.
func (s *Server) tlsArgs() []string {
	f := s.TLS
	return []string{"--port", "0", "--tls-port", itoa(s.port),
		"--tls-cert-file", f.ServerCert, "--tls-key-file", f.ServerKey,
		"--tls-ca-cert-file", f.CA, "--tls-auth-clients", "yes"}
}

// writeACLFile writes the users of Options.Users to an ACL file in the server's
// directory and returns its path. The default user keeps every permission (tests set up
// and check data through it); a line may redefine it.
func (s *Server) writeACLFile() string {
	s.tb.Helper()
	lines := []string{"user default on nopass ~* &* +@all"}
	for _, u := range s.opts.Users {
		u = strings.TrimSpace(u)
		if rest, ok := cutPrefixFold(u, "ACL SETUSER "); ok {
			u = rest
		}
		lines = append(lines, "user "+u)
	}
	path := filepath.Join(s.dir, "users.acl")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		s.tb.Fatal(err)
	}
	return path
}

func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix) {
		return s[len(prefix):], true
	}
	return s, false
}

func itoa(n int) string { return strconv.Itoa(n) }
