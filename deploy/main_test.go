package deploy

import (
	"log/slog"
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	// Helm's chart loader logs at info level each file the chart takes through a symlink
	// (the dashboard and the rules, which live outside the chart): expected, so not shown.
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	os.Exit(m.Run())
}
