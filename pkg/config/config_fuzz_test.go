package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seqctl/seqctl/pkg/engine"
)

// FuzzParse checks that the parser never panics, that every failure is a
// *Error of one-line problems, and that a config it accepts builds a domain.
// The seed corpus is the repository's testdata/domain.toml and testdata/invalid/*.toml.
func FuzzParse(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join(repoTestdata, "invalid", "*.toml"))
	seeds = append(seeds, filepath.Join(repoTestdata, "domain.toml"))
	for _, path := range seeds {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatalf("seed %s: %v", path, err)
		}
		f.Add(data)
	}
	f.Add([]byte(""))
	f.Add([]byte("name = \"x\"\n[[handlers]]\nname = \"h\"\nhandles = [{a = 1}]\n"))
	f.Add([]byte("name = \"x\"\n[[process_managers]]\nname = \"p\"\nhandles = [{ event = \"E\", correlate = { a = \"b\" } }]\n"))

	f.Fuzz(func(t *testing.T, data []byte) {
		// The line scanner runs on valid TOML only, but it must survive anything.
		_ = scanKeyLines(string(data))

		cfg, err := parseConfig("fuzz.toml", data, noEnv)
		if err != nil {
			if cfg != nil {
				t.Fatalf("parseConfig returned a config together with an error")
			}
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("error %T (%v), want *Error", err, err)
			}
			if len(ce.Problems) == 0 {
				t.Fatalf("Error without problems")
			}
			for _, p := range ce.Problems {
				if p.Message == "" {
					t.Fatalf("problem without a message: %+v", p)
				}
				if strings.ContainsAny(p.Message, "\n\r") {
					t.Fatalf("problem message spans lines: %q", p.Message)
				}
				if p.Line < 0 || p.Line > strings.Count(string(data), "\n")+1 {
					t.Fatalf("problem line %d outside the file: %+v", p.Line, p)
				}
			}
			if got, want := strings.Count(ce.Error(), "\n"), len(ce.Problems)-1; got != want {
				// Paths quote unusual keys, so a newline in a key is escaped too.
				t.Fatalf("Error() has %d line breaks for %d problems:\n%s", got, len(ce.Problems), ce.Error())
			}
			return
		}
		d, err := cfg.Domain()
		if err != nil {
			t.Fatalf("accepted config does not build a domain: %v", err)
		}
		if d.Name != cfg.Name || len(d.Handlers) != len(cfg.Handlers) || len(d.ProcessManagers) != len(cfg.ProcessManagers) {
			t.Fatalf("domain does not mirror the config")
		}
		if err := cfg.Server.Partitioning.Validate(); err != nil {
			t.Fatalf("accepted config has invalid partitioning: %v", err)
		}
		// Registration may reject the domain, but always as a *Error.
		if _, err := cfg.InitDomain(); err != nil {
			var ce *Error
			var iue *engine.IncorrectUsageError
			if !errors.As(err, &ce) || !errors.As(err, &iue) {
				t.Fatalf("InitDomain error %T (%v), want a *Error wrapping *IncorrectUsageError", err, err)
			}
		}
	})
}
