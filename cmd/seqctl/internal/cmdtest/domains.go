package cmdtest

import (
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/seqctl/seqctl/pkg/config"
	"github.com/seqctl/seqctl/pkg/engine"
)

// domainsDir holds the domain.toml files of the tests, NAME.toml (absolute: some tests
// change the working directory):
//
//	ops               OrderPlaced in "order" by client_id, handled by Projector (2
//	                  attempts, 10 ms apart): the live engine of the end-to-end tests
//	ops-mailer        ops with a second handler, Mailer, on "order"
//	publish           "order" by client_id with priority lanes, "audit" unpartitioned
//	commands          a [broker] url and a command handler only: nothing 'seqctl run'
//	                  can deliver; tests add handlers
//	exec              Projector delivered to the command @HANDLER@, 1 s leases
//	http-unreachable  Projector delivered over HTTP to a closed port, with a password
//	                  and the token @TOKEN@ in the URL, one attempt
//	inline            two categories on the inline broker
//	outbox            an [outbox] at @DSN@
//	outbox-replicas   outbox, with [broker] min_replicas = 1
//	sqlsink           OrderProjector runs @STATEMENT@ through a SQL sink whose DSN is in
//	                  $SEQCTL_TEST_ORDERS_DB, two attempts
var domainsDir = filepath.Join(sourceDir(), "testdata", "domains")

// sourceDir is the directory of this source file.
func sourceDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

// placeholder is an @KEY@ a domain file leaves to the test.
var placeholder = regexp.MustCompile(`@[A-Z]+@`)

// DomainText returns testdata/domains/NAME.toml with each @KEY@ of replace (KEY, value
// pairs) set to its value.
func DomainText(t testing.TB, name string, replace ...string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(domainsDir, name+".toml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(replace)%2 != 0 {
		t.Fatalf("domain %s: replace takes KEY, value pairs, got %q", name, replace)
	}
	s := string(b)
	for i := 0; i < len(replace); i += 2 {
		s = strings.ReplaceAll(s, "@"+replace[i]+"@", replace[i+1])
	}
	if p := placeholder.FindString(s); p != "" {
		t.Fatalf("domain %s: nothing replaces %s", name, p)
	}
	return s
}

// WriteDomain writes testdata/domains/NAME.toml, with replace applied (see DomainText),
// into a temporary directory and returns its path.
func WriteDomain(t *testing.T, name string, replace ...string) string {
	t.Helper()
	return WriteConfig(t, DomainText(t, name, replace...))
}

// WriteConfig writes a domain.toml into a temporary directory and returns its path.
func WriteConfig(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "domain.toml")
	WriteFile(t, path, content)
	return path
}

func WriteFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// LoadDomain loads the domain.toml at path and initialises its domain.
func LoadDomain(t testing.TB, path string) (*config.Config, *engine.Domain) {
	t.Helper()
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	dom, err := cfg.InitDomain()
	if err != nil {
		t.Fatal(err)
	}
	return cfg, dom
}
