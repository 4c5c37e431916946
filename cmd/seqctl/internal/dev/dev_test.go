package dev

import (
	"errors"
	"strings"
	"testing"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdtest"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/pkg/demo"
)

func TestDevParse(t *testing.T) {
	f := cmdtest.NewFactory()
	var got *Options
	if err := cmdtest.ParseOps(t, f, "", NewCmd(f, func(o *Options) error { got = o; return nil })); err != nil {
		t.Fatal(err)
	}
	if got.Poison != demo.DefaultPoisonEvery || got.Rate != 50 {
		t.Errorf("defaults: poison every %d at %d/s, want %d at 50/s", got.Poison, got.Rate, demo.DefaultPoisonEvery)
	}
	err := cmdtest.ParseOps(t, f, "", NewCmd(f, func(*Options) error { return nil }), "--rate", "0")
	if cmdutil.ExitCode(err) != cmdutil.ExitUsage || !strings.Contains(err.Error(), "--rate must be a positive number") {
		t.Errorf("--rate 0: %v", err)
	}
}

func TestOtherShellHint(t *testing.T) {
	found := func(string) (string, error) { return "/usr/local/bin/seqctl", nil }
	missing := func(string) (string, error) { return "", errors.New("not found") }
	if got := otherShellHint("redis://127.0.0.1:4000/0", found); got != "  other shells: seqctl partitions list --redis-url redis://127.0.0.1:4000/0" {
		t.Errorf("with seqctl on the PATH: %q", got)
	}
	got := otherShellHint("redis://127.0.0.1:4000/0", missing)
	for _, want := range []string{"no seqctl on the PATH", "go install ./cmd/seqctl", "make build", "seqctl partitions list --redis-url redis://127.0.0.1:4000/0"} {
		if !strings.Contains(got, want) {
			t.Errorf("without seqctl: %q lacks %q", got, want)
		}
	}
}
