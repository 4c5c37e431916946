package cmdutil

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/seqctl/seqctl/pkg/config"
)

// ConfigOrDefault is the domain.toml of run and publish: the global --config, else
// ./domain.toml (as for validate).
func ConfigOrDefault(path string) string {
	if path == "" {
		return "domain.toml"
	}
	return path
}

func ParseLogLevel(s string) (slog.Level, error) {
	var l slog.Level
	switch s {
	case "debug", "info", "warn", "error":
		return l, l.UnmarshalText([]byte(s))
	}
	return l, fmt.Errorf("unknown log level %q", s)
}

// NewLogger returns the structured logger of 'seqctl run', writing to w.
func NewLogger(w io.Writer, format, level string) *slog.Logger {
	lvl, _ := ParseLogLevel(level)
	ho := &slog.HandlerOptions{Level: lvl}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, ho))
	}
	return slog.New(slog.NewTextHandler(w, ho))
}

// LoadConfigFile loads a domain.toml, with the CLI's wording for a missing file.
func LoadConfigFile(path string) (*config.Config, error) {
	cfg, err := config.Load(path)
	if err != nil {
		var ce *config.Error
		if errors.Is(err, os.ErrNotExist) && errors.As(err, &ce) && len(ce.Problems) == 1 {
			ce.Problems[0].Message = "the config file does not exist; pass --config with the path of your domain.toml"
		}
		return nil, err
	}
	return cfg, nil
}
