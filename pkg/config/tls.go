package config

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"

	"github.com/redis/go-redis/v9"
)

// TLSConfig are the Redis client's TLS settings: [broker.tls] in domain.toml, or the
// operator commands' --redis-tls-* flags and SEQCTL_REDIS_TLS_* variables. The zero
// value adds nothing: a rediss:// URL then verifies the server against the system roots.
// Any setting turns TLS on, whatever the URL's scheme.
type TLSConfig struct {
	// CAFile is a PEM file of the CA certificates that verify the server (ca_file);
	// "" means the system roots.
	CAFile string
	// CertFile and KeyFile are the PEM client certificate and its key, for servers that
	// require client certificates (tls-auth-clients yes); both or neither.
	CertFile string
	KeyFile  string
	// ServerName is the name the server certificate must carry (server_name); "" means
	// the URL's host.
	ServerName string
	// MinVersion is the lowest TLS version accepted (min_version): "1.2" (the default)
	// or "1.3".
	MinVersion string
	// InsecureSkipVerify accepts any server certificate (insecure_skip_verify). Anyone
	// on the path can then read and change the traffic; seqctl warns at every start.
	InsecureSkipVerify bool
}

// TLS setting names, as in [broker.tls]. TLSError.Setting is one of them.
const (
	TLSSettingCA         = "ca_file"
	TLSSettingCert       = "cert_file"
	TLSSettingKey        = "key_file"
	TLSSettingServerName = "server_name"
	TLSSettingMinVersion = "min_version"
)

// TLSError is a TLS setting that cannot be used: a missing or unreadable file, a file
// without the PEM it should hold, a certificate without its key, an unknown version.
type TLSError struct {
	Setting string // a TLSSetting* name
	Path    string // the file, when the problem is one
	Message string
	Err     error
}

func (e *TLSError) Error() string {
	if e.Path != "" {
		return fmt.Sprintf("%s %s: %s", e.Setting, e.Path, e.Message)
	}
	return e.Setting + ": " + e.Message
}

func (e *TLSError) Unwrap() error { return e.Err }

// IsZero reports whether no setting is set.
func (c TLSConfig) IsZero() bool { return c == TLSConfig{} }

// ClientConfig reads the files and returns the tls.Config of a Redis client. serverName
// is used when c.ServerName is empty (the URL's host). Every problem is a *TLSError.
func (c TLSConfig) ClientConfig(serverName string) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName, InsecureSkipVerify: c.InsecureSkipVerify} //nolint:gosec // opt-in, warned about at start
	if c.ServerName != "" {
		tc.ServerName = c.ServerName
	}
	switch c.MinVersion {
	case "", "1.2":
	case "1.3":
		tc.MinVersion = tls.VersionTLS13
	default:
		return nil, &TLSError{Setting: TLSSettingMinVersion, Message: fmt.Sprintf("unknown TLS version %q; use \"1.2\" (the default) or \"1.3\"", c.MinVersion)}
	}
	if c.CAFile != "" {
		b, err := readTLSFile(TLSSettingCA, c.CAFile)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, &TLSError{Setting: TLSSettingCA, Path: c.CAFile, Message: "holds no PEM certificate (want the CA certificate, -----BEGIN CERTIFICATE-----)"}
		}
		tc.RootCAs = pool
	}
	switch {
	case c.CertFile != "" && c.KeyFile == "":
		return nil, &TLSError{Setting: TLSSettingKey, Message: "missing: cert_file needs the key_file of its private key"}
	case c.KeyFile != "" && c.CertFile == "":
		return nil, &TLSError{Setting: TLSSettingCert, Message: "missing: key_file needs the cert_file of its certificate"}
	case c.CertFile != "":
		cb, err := readTLSFile(TLSSettingCert, c.CertFile)
		if err != nil {
			return nil, err
		}
		kb, err := readTLSFile(TLSSettingKey, c.KeyFile)
		if err != nil {
			return nil, err
		}
		if blk, _ := pem.Decode(cb); blk == nil {
			return nil, &TLSError{Setting: TLSSettingCert, Path: c.CertFile, Message: "holds no PEM certificate"}
		}
		if blk, _ := pem.Decode(kb); blk == nil {
			return nil, &TLSError{Setting: TLSSettingKey, Path: c.KeyFile, Message: "holds no PEM private key"}
		}
		cert, err := tls.X509KeyPair(cb, kb)
		if err != nil {
			return nil, &TLSError{Setting: TLSSettingKey, Path: c.KeyFile, Message: "does not fit cert_file " + c.CertFile + ": " + err.Error(), Err: err}
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

func readTLSFile(setting, path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		msg := "does not exist"
		if reason, missing := readFailure(err); !missing {
			msg = "cannot read it: " + reason
		}
		return nil, &TLSError{Setting: setting, Path: path, Message: msg, Err: err}
	}
	return b, nil
}

// ApplyTLS sets opt.TLSConfig from c: when c has any setting, or when opt already uses
// TLS (a rediss:// URL), whose server name it keeps unless c names one. It leaves a
// plain connection alone when c is zero.
func (c TLSConfig) ApplyTLS(opt *redis.Options) error {
	tc, err := c.apply(opt.TLSConfig, opt.Addr)
	if err != nil {
		return err
	}
	opt.TLSConfig = tc
	return nil
}

// ApplyClusterTLS is ApplyTLS for a Redis Cluster client. One tls.Config serves every
// node of the cluster, so each node's certificate must carry the same server name: the
// host of the URL (its first address) unless c names one.
func (c TLSConfig) ApplyClusterTLS(opt *redis.ClusterOptions) error {
	addr := ""
	if len(opt.Addrs) > 0 {
		addr = opt.Addrs[0]
	}
	tc, err := c.apply(opt.TLSConfig, addr)
	if err != nil {
		return err
	}
	opt.TLSConfig = tc
	return nil
}

// apply returns the client's tls.Config with c applied: current unchanged when c is
// zero, else c's config with current's server name, or addr's host, as the default name.
func (c TLSConfig) apply(current *tls.Config, addr string) (*tls.Config, error) {
	if c.IsZero() {
		return current, nil
	}
	name := ""
	if current != nil {
		name = current.ServerName
	}
	if name == "" {
		name, _, _ = net.SplitHostPort(addr)
	}
	return c.ClientConfig(name)
}
