// Package config reads domain.toml: the events and commands a domain declares, its
// handlers and process managers, how `seqctl run` delivers each handler's events (HTTP or
// exec), and the server's tuning. The engine never reads a file; this package turns one
// into the engine's types.
//
// Parsing is strict: an unknown key, a value of the wrong type or an inconsistent value
// (a heartbeat not below the lease TTL, a negative duration) is a Problem naming the key
// path and its line, and every problem of a file is reported at once, in an *Error.
// Secrets stay out of the file: SEQCTL_REDIS_URL ([broker] url) and SEQCTL_OUTBOX_DSN
// ([outbox] dsn) override it, and a handler's signing key is read from the environment.
//
// Typical use:
//
//	cfg, err := config.Load("domain.toml") // *config.Error lists every problem
//	dom, err := cfg.InitDomain()           // registration checks, against the configured broker
//	ecfg := cfg.EngineConfig(dom, rdb)     // [server] tuning for engine.New
//	eng, err := engine.New(ecfg)
//
// Files:
//
//	config.go         Config and the types of its tables; Load, Parse; the engine's types built from them
//	config_decode.go  the decoder: one method per table, with every problem it finds
//	config_values.go  typed access to a table's values (strings, numbers, durations), unknown keys
//	config_lines.go   the line of each key path, for problems found after parsing
//	tls.go            [broker.tls]: the CA, client certificate and key, as a crypto/tls.Config
//
// testdata/domain.toml is a complete, commented example; docs/configuration.md documents
// every key.
package config
