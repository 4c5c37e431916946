package redisconn

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/seqctl/seqctl/pkg/config"
	"github.com/seqctl/seqctl/pkg/engine"
)

// The Redis TLS settings and the ACL permissions: where each TLS setting comes from, and
// what to tell an operator when the handshake or a permission check fails.

// SecurityDoc is where the TLS settings and the ACL users of each role are documented.
const SecurityDoc = engine.SecurityDoc

// resolveTLS merges the TLS settings, each on its own: a --redis-tls-* flag, else its
// SEQCTL_REDIS_TLS_* variable, else the config's [broker.tls] key. Any setting turns TLS
// on, even with a redis:// URL; a rediss:// URL without settings verifies against the
// system roots.
func resolveTLS(flags config.TLSConfig, cfg *config.Config, getenv func(string) string) config.TLSConfig {
	var c config.TLSConfig
	if cfg != nil {
		c = cfg.Broker.TLS
	}
	for _, s := range tlsSources(flags) {
		if v := s.flag; v != "" {
			*s.field(&c) = v
		} else if v := getenv(s.env); v != "" {
			*s.field(&c) = v
		}
	}
	switch strings.ToLower(getenv(EnvRedisTLSInsecure)) {
	case "1", "true", "yes":
		c.InsecureSkipVerify = true
	}
	return c
}

// tlsSource is one TLS setting's flag value, variable and config key.
type tlsSource struct {
	setting       string // the [broker.tls] key, an engine.TLSSetting* name
	flag          string // the flag's value
	flagName, env string
	field         func(*config.TLSConfig) *string
}

func tlsSources(flags config.TLSConfig) []tlsSource {
	return []tlsSource{
		{config.TLSSettingCA, flags.CAFile, "--redis-tls-ca", EnvRedisTLSCA, func(c *config.TLSConfig) *string { return &c.CAFile }},
		{config.TLSSettingCert, flags.CertFile, "--redis-tls-cert", EnvRedisTLSCert, func(c *config.TLSConfig) *string { return &c.CertFile }},
		{config.TLSSettingKey, flags.KeyFile, "--redis-tls-key", EnvRedisTLSKey, func(c *config.TLSConfig) *string { return &c.KeyFile }},
		{config.TLSSettingServerName, flags.ServerName, "--redis-tls-server-name", EnvRedisTLSServerName, func(c *config.TLSConfig) *string { return &c.ServerName }},
		{config.TLSSettingMinVersion, flags.MinVersion, "--redis-tls-min-version", EnvRedisTLSMinVersion, func(c *config.TLSConfig) *string { return &c.MinVersion }},
	}
}

// tlsSettingNames names every place a TLS setting can be given, for messages.
func tlsSettingNames(setting string) string {
	for _, s := range tlsSources(config.TLSConfig{}) {
		if s.setting == setting {
			return fmt.Sprintf("%s, $%s or [broker.tls] %s", s.flagName, s.env, s.setting)
		}
	}
	return "[broker.tls] " + setting
}

// tlsSettingError rewrites an *config.TLSError with the name of the flag, variable or
// config key the bad value came from.
func tlsSettingError(err error, flags config.TLSConfig, cfg *config.Config, getenv func(string) string) error {
	var te *config.TLSError
	if !errors.As(err, &te) {
		return err
	}
	from := tlsSettingNames(te.Setting)
	for _, s := range tlsSources(flags) {
		if s.setting != te.Setting {
			continue
		}
		switch {
		case s.flag != "":
			from = s.flagName
		case getenv(s.env) != "":
			from = "$" + s.env
		case cfg != nil && *s.field(&cfg.Broker.TLS) != "":
			from = cfg.File + ": broker.tls." + s.setting
		}
	}
	if te.Path != "" {
		return fmt.Errorf("Redis TLS: %s %q %s", from, te.Path, te.Message)
	}
	return fmt.Errorf("Redis TLS: %s: %s", from, te.Message)
}

// WarnInsecureTLS calls warn when the connection would accept any server certificate.
func WarnInsecureTLS(tc *tls.Config, warn func(string)) {
	if tc != nil && tc.InsecureSkipVerify {
		warn("Redis TLS certificate verification is OFF (insecure_skip_verify / " + EnvRedisTLSInsecure + "): anyone on the network path can read and change the traffic, credentials included; set the CA with " + tlsSettingNames(config.TLSSettingCA) + " instead")
	}
}

// TLSProblem says what to fix when err is a TLS handshake failure that waiting cannot
// cure, or returns "". where names the server ("Redis at URL", "Redis Cluster at URL";
// "" when unknown).
func TLSProblem(err error, where string) string {
	if err == nil {
		return ""
	}
	msg := err.Error()
	if strings.Contains(msg, "TLS handshake with Redis") {
		return "" // explained already
	}
	if where == "" {
		where = "Redis"
	}
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	switch {
	case errors.As(err, &unknown) || strings.Contains(msg, "certificate signed by unknown authority"):
		return fmt.Sprintf("TLS handshake with %s failed: its certificate is not signed by a CA seqctl trusts (%v); give the CA that signed it with %s", where, err, tlsSettingNames(config.TLSSettingCA))
	case errors.As(err, &host) || strings.Contains(msg, "x509: certificate is valid for"):
		return fmt.Sprintf("TLS handshake with %s failed: its certificate does not carry the host name (%v); connect by a name it carries, or set %s", where, err, tlsSettingNames(config.TLSSettingServerName))
	case errors.As(err, &invalid) || strings.Contains(msg, "x509: certificate has expired"):
		return fmt.Sprintf("TLS handshake with %s failed: its certificate is not valid (%v); renew the server certificate, or check the clock", where, err)
	case strings.Contains(msg, "tls: certificate required"):
		return fmt.Sprintf("TLS handshake with %s failed: Redis requires a client certificate (%v); give one with %s and %s", where, err, tlsSettingNames(config.TLSSettingCert), tlsSettingNames(config.TLSSettingKey))
	case strings.Contains(msg, "remote error: tls: unknown certificate authority") || strings.Contains(msg, "remote error: tls: bad certificate") ||
		strings.Contains(msg, "remote error: tls: certificate expired") || strings.Contains(msg, "remote error: tls: unsupported certificate"):
		return fmt.Sprintf("TLS handshake with %s failed: Redis refused the client certificate (%v); give one signed by the CA of Redis's tls-ca-cert-file with %s and %s", where, err, tlsSettingNames(config.TLSSettingCert), tlsSettingNames(config.TLSSettingKey))
	case strings.Contains(msg, "remote error: tls: protocol version not supported") || strings.Contains(msg, "tls: server selected unsupported protocol version"):
		return fmt.Sprintf("TLS handshake with %s failed: no TLS version both sides accept (%v); check %s and Redis's tls-protocols", where, err, tlsSettingNames(config.TLSSettingMinVersion))
	case strings.Contains(msg, "first record does not look like a TLS handshake"):
		return fmt.Sprintf("TLS handshake with %s failed: that port does not speak TLS (%v); use a redis:// URL without TLS settings, or the port of Redis's tls-port", where, err)
	}
	return ""
}

// PermissionProblem explains a NOPERM reply: which permission the Redis ACL user lacks
// and where the ACL of each role is documented; "" when err holds no NOPERM reply.
func PermissionProblem(err error) string {
	missing, reply := engine.MissingPermission(err)
	if missing == "" {
		return ""
	}
	return fmt.Sprintf("the Redis ACL user lacks %s (%s); grant the ACL of this role as %s shows, or use a user that has it", missing, reply, SecurityDoc)
}

// ClosedConnProblem explains a connection Redis closed at once (EOF, reset), or returns
// "". Over plain TCP: when the port answers a TLS handshake (Redis's tls-port), it says
// to use TLS. Over TLS without a client certificate: when Redis refuses the handshake
// for the lack of one, it says to give one (see clientCertProblem).
//
// The plain-TCP probe only recognises the protocol: it sends a TLS hello and nothing
// over the connection, so it does not verify the certificate. A proxy without a backend
// also closes at once; it fails the probe and stays "unreachable". A cluster's first
// address is probed.
func ClosedConnProblem(err error, c *Conn) string {
	if err != nil && c != nil && c.TLSConfig() != nil {
		return clientCertProblem(err, c)
	}
	if err == nil || c == nil || (!c.IsCluster() && c.node.Network == "unix") {
		return ""
	}
	if !closedAtOnce(err) {
		return ""
	}
	conn, derr := net.DialTimeout("tcp", c.addrs()[0], 2*time.Second)
	if derr != nil {
		return ""
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	herr := tls.Client(conn, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}).Handshake() //nolint:gosec // recognises the protocol only; no data is sent
	if herr != nil && !strings.Contains(herr.Error(), "remote error: tls:") {
		return ""
	}
	return fmt.Sprintf("%s closed the connection (%v): that port speaks TLS; use a rediss:// URL (or TLS settings) and give the CA that signed its certificate with %s", c.Where(), err, tlsSettingNames(config.TLSSettingCA))
}

// closedAtOnce reports an error of a connection the peer closed: EOF or a reset.
func closedAtOnce(err error) bool {
	msg := err.Error()
	return errors.Is(err, io.EOF) || strings.HasSuffix(msg, "EOF") || strings.Contains(msg, "connection reset by peer")
}

// clientCertProblem explains a TLS connection Redis closed although the handshake seemed
// to succeed, when no client certificate is configured. With TLS 1.3 the server checks
// the client's certificate after the client has finished its side of the handshake, so
// the first command fails with a reset or an EOF, not always with the server's alert. The
// probe does the handshake again and reads without sending anything, which gets the
// alert; when it says a certificate is required, the message says to give one.
func clientCertProblem(err error, c *Conn) string {
	tc := c.TLSConfig()
	if len(tc.Certificates) > 0 || tc.GetClientCertificate != nil || !closedAtOnce(err) {
		return ""
	}
	addr := c.addrs()[0]
	conn, derr := net.DialTimeout("tcp", addr, 2*time.Second)
	if derr != nil {
		return ""
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	probe := tc.Clone()
	if probe.ServerName == "" {
		probe.ServerName, _, _ = net.SplitHostPort(addr)
	}
	tconn := tls.Client(conn, probe)
	rerr := tconn.Handshake()
	if rerr == nil {
		_, rerr = tconn.Read(make([]byte, 1))
	}
	if rerr == nil || !strings.Contains(rerr.Error(), "tls: certificate required") {
		return ""
	}
	return TLSProblem(fmt.Errorf("%w (the command failed with: %v)", rerr, err), c.Where())
}
