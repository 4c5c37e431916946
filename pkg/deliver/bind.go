package deliver

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/seqctl/seqctl/pkg/config"
	"github.com/seqctl/seqctl/pkg/engine"
	"github.com/seqctl/seqctl/pkg/inbox"
	"github.com/seqctl/seqctl/pkg/redact"
)

// BindOptions are the outside world Bind reads. Zero values use the process's own.
type BindOptions struct {
	// LookupEnv reads signing_key_env and signing_previous_key_env (default os.LookupEnv).
	LookupEnv func(string) (string, bool)
	// ReadFile reads signing_key_file and signing_previous_key_file (default os.ReadFile).
	ReadFile func(string) ([]byte, error)
	// LookPath checks that exec programs exist (default exec.LookPath).
	LookPath func(string) (string, error)
	// HTTPClient is shared by every HTTP delivery (default NewHTTPClient()).
	HTTPClient *http.Client
	// Procs tracks running exec deliveries (default: not tracked).
	Procs *Procs
	// Logger receives what SQL sinks log (default: nothing).
	Logger *slog.Logger
}

// Binding says how one handler or process manager is delivered.
type Binding struct {
	// Name is the handler or process manager name (its consumer group).
	Name string
	// Kind is "handler", "process manager" or "command handler".
	Kind string
	// Mode is "http", "exec" or "sql"; "" for an inert command handler.
	Mode string
	// Target is the URL, the command line, or where the SQL sink's DSN comes from, with
	// secrets masked (redact.URL), for logs.
	Target string
	// Signed says the HTTP requests carry X-Seq-Signature.
	Signed bool
	// BatchMax is the most events one call takes (batch_max), above 1 for a handler bound
	// to a BatchFunc; 0 or 1 for one event per call.
	BatchMax int
	// BatchWait is the handler's batch_wait.
	BatchWait time.Duration
	// Sink is the SQL sink of a "sql" binding: start it (it reads its DSN then, and
	// waits for the database) before the engine runs the handler.
	Sink *inbox.Sink
}

// Bind gives every event handler and process manager of dom (built from cfg with
// cfg.InitDomain) the HandlerFunc its deliver table describes, and returns what it bound,
// in file order. A handler with batch_max above 1 gets a BatchFunc instead (HTTPBatch,
// ExecBatch, the SQL sink's BatchHandler), and its Func is left nil. Command handlers are left alone: they are validated by Init but inert at
// runtime (commands never reach a stream); they are listed with an empty Mode.
//
// Every problem is reported at once, as a *config.Error for cfg.File: an event
// handler or process manager without a deliver table (only Go code can run it), a
// signing key whose variable is unset or empty or whose file cannot be read or is empty,
// an exec program that cannot be found. Nothing is bound when there is a problem.
func Bind(cfg *config.Config, dom *engine.Domain, opt BindOptions) ([]Binding, error) {
	if opt.LookupEnv == nil {
		opt.LookupEnv = os.LookupEnv
	}
	if opt.ReadFile == nil {
		opt.ReadFile = os.ReadFile
	}
	if opt.LookPath == nil {
		opt.LookPath = exec.LookPath
	}
	if opt.HTTPClient == nil {
		opt.HTTPClient = NewHTTPClient()
	}
	ce := &config.Error{File: cfg.File}
	var bindings []Binding
	funcs := map[string]bound{}
	build := func(path, table, kind, name string, dc *config.DeliverConfig, batch batching) {
		if dc == nil {
			ce.Problems = append(ce.Problems, config.Problem{Path: path, Message: fmt.Sprintf(
				"%s %q has no [%s.deliver] table, so seqctl run cannot deliver its events: add one with http = \"URL\" or exec = [\"program\"] (a handler without one is run by Go code embedding the engine)",
				kind, name, table)})
			return
		}
		fns, b, problems := buildOne(path, name, dc, batch, opt)
		ce.Problems = append(ce.Problems, problems...)
		if fns.fn == nil && fns.batch == nil {
			return
		}
		b.Name, b.Kind = name, kind
		b.BatchMax, b.BatchWait = batch.max, batch.wait
		funcs[kind+"\x00"+name] = fns
		bindings = append(bindings, b)
	}
	for i, h := range cfg.Handlers {
		if h.Kind == engine.CommandHandlerKind {
			bindings = append(bindings, Binding{Name: h.Name, Kind: "command handler"})
			continue
		}
		build(fmt.Sprintf("handlers[%d]", i), "handlers", "handler", h.Name, h.Deliver, batching{h.BatchMax, h.BatchWait})
	}
	for i, p := range cfg.ProcessManagers {
		build(fmt.Sprintf("process_managers[%d]", i), "process_managers", "process manager", p.Name, p.Deliver, batching{})
	}
	if len(ce.Problems) > 0 {
		return nil, ce
	}
	for i := range dom.Handlers {
		if fns, ok := funcs["handler\x00"+dom.Handlers[i].Name]; ok {
			dom.Handlers[i].Func, dom.Handlers[i].BatchFunc = fns.fn, fns.batch
		}
	}
	for i := range dom.ProcessManagers {
		if fns, ok := funcs["process manager\x00"+dom.ProcessManagers[i].Name]; ok {
			dom.ProcessManagers[i].Func = fns.fn
		}
	}
	return bindings, nil
}

// batching is a handler's batch_max and batch_wait; the zero value takes one event per
// call.
type batching struct {
	max  int
	wait time.Duration
}

// bound is what a deliver table runs: fn for one event per call, or batch for runs.
type bound struct {
	fn    engine.HandlerFunc
	batch engine.BatchFunc
}

// buildOne builds the function of one deliver table: a HandlerFunc, or a BatchFunc when
// batch.max is above 1.
func buildOne(path, name string, dc *config.DeliverConfig, batch batching, opt BindOptions) (bound, Binding, []config.Problem) {
	batched := batch.max > 1
	var problems []config.Problem
	var keys [][]byte
	for _, src := range []struct{ env, file, key string }{
		{dc.SigningKeyEnv, dc.SigningKeyFile, "signing_key"},
		{dc.SigningPreviousKeyEnv, dc.SigningPreviousKeyFile, "signing_previous_key"},
	} {
		k, p := readKey(path, src.env, src.file, src.key, opt)
		if p != nil {
			problems = append(problems, *p)
		} else if k != nil {
			keys = append(keys, k)
		}
	}
	if dc.HTTP != "" {
		if len(problems) > 0 {
			return bound{}, Binding{}, problems
		}
		hc := HTTPConfig{URL: dc.HTTP, Timeout: dc.Timeout, Keys: keys, Client: opt.HTTPClient}
		var fns bound
		var err error
		if batched {
			fns.batch, err = HTTPBatch(hc)
		} else {
			fns.fn, err = HTTP(hc)
		}
		if err != nil {
			return bound{}, Binding{}, append(problems, config.Problem{Path: path + ".deliver.http", Message: err.Error()})
		}
		return fns, Binding{Mode: "http", Target: redact.URL(dc.HTTP), Signed: len(keys) > 0}, nil
	}
	if dc.SQL != nil {
		if len(problems) > 0 {
			return bound{}, Binding{}, problems
		}
		sink, err := inbox.NewSink(inbox.SinkConfig{Handler: name, DSN: SQLDSN(dc.SQL, opt), Statement: dc.SQL.Statement,
			Table: dc.SQL.Table, Timeout: dc.Timeout, Conns: dc.Limit(), Logger: opt.Logger})
		if err != nil {
			return bound{}, Binding{}, []config.Problem{{Path: path + ".deliver.sql.statement", Message: err.Error()}}
		}
		fns := bound{fn: sink.Handler()}
		if batched {
			fns = bound{batch: sink.BatchHandler()}
		}
		return fns, Binding{Mode: "sql", Target: dsnSource(dc.SQL), Sink: sink}, nil
	}
	if len(dc.Exec) == 0 || dc.Exec[0] == "" {
		return bound{}, Binding{}, append(problems, config.Problem{Path: path + ".deliver.exec", Message: "needs a program to run"})
	}
	if _, err := opt.LookPath(dc.Exec[0]); err != nil {
		problems = append(problems, config.Problem{Path: path + ".deliver.exec", Message: fmt.Sprintf(
			"cannot run %q: %v (a program name is looked up on PATH; a path with a slash is relative to the working directory)",
			dc.Exec[0], unwrapExecErr(err))})
	}
	if len(problems) > 0 {
		return bound{}, Binding{}, problems
	}
	ec := ExecConfig{Argv: dc.Exec, Timeout: dc.Timeout, Procs: opt.Procs}
	var fns bound
	var err error
	if batched {
		fns.batch, err = ExecBatch(ec)
	} else {
		fns.fn, err = Exec(ec)
	}
	if err != nil {
		return bound{}, Binding{}, []config.Problem{{Path: path + ".deliver.exec", Message: err.Error()}}
	}
	shown := make([]string, len(dc.Exec))
	for i, a := range dc.Exec {
		shown[i] = redact.URL(a) // an argument may be a DSN or --token=...
	}
	return fns, Binding{Mode: "exec", Target: strings.Join(shown, " ")}, nil
}

// readKey reads one signing key from the environment variable env or the file file
// (one of them set, or neither: no key). A file's trailing newline is dropped.
func readKey(path, env, file, key string, opt BindOptions) ([]byte, *config.Problem) {
	switch {
	case env != "":
		v, ok := opt.LookupEnv(env)
		if !ok || v == "" {
			return nil, &config.Problem{Path: path + ".deliver." + key + "_env", Message: fmt.Sprintf(
				"the environment variable %s is not set (or empty): export the signing key in it before starting seqctl run, or remove %s_env to send unsigned requests",
				env, key)}
		}
		return []byte(v), nil
	case file != "":
		b, err := opt.ReadFile(file)
		if err == nil {
			b = bytes.TrimSuffix(bytes.TrimSuffix(b, []byte("\n")), []byte("\r"))
		}
		if err == nil && len(b) == 0 {
			err = errors.New(file + " is empty")
		}
		if err != nil {
			// The error names the file, never its content.
			return nil, &config.Problem{Path: path + ".deliver." + key + "_file", Message: fmt.Sprintf(
				"cannot read the signing key: %v", err)}
		}
		return b, nil
	}
	return nil, nil
}

// SQLDSN returns the reader of a SQL sink's DSN: from the environment variable or the
// file its table names. Its error says what to do, and never shows a DSN.
func SQLDSN(sc *config.SQLSinkConfig, opt BindOptions) func() (string, error) {
	if opt.LookupEnv == nil {
		opt.LookupEnv = os.LookupEnv
	}
	if opt.ReadFile == nil {
		opt.ReadFile = os.ReadFile
	}
	return func() (string, error) {
		if sc.DSNEnv != "" {
			v, ok := opt.LookupEnv(sc.DSNEnv)
			if !ok || strings.TrimSpace(v) == "" {
				return "", fmt.Errorf("the environment variable %s is not set (or empty): export the database's DSN in it (postgres://USER@HOST:5432/DB or sqlite://FILE) before starting seqctl run", sc.DSNEnv)
			}
			return strings.TrimSpace(v), nil
		}
		b, err := opt.ReadFile(sc.DSNFile)
		if err == nil {
			b = bytes.TrimSpace(b)
			if len(b) == 0 {
				err = errors.New(sc.DSNFile + " is empty")
			}
		}
		if err != nil {
			return "", fmt.Errorf("cannot read the database's DSN: %v", err) // names the file, never its content
		}
		return string(b), nil
	}
}

// dsnSource says where a SQL sink's DSN comes from, for logs.
func dsnSource(sc *config.SQLSinkConfig) string {
	if sc.DSNEnv != "" {
		return "sql: the DSN in $" + sc.DSNEnv + ", inbox " + sc.Table
	}
	return "sql: the DSN in " + sc.DSNFile + ", inbox " + sc.Table
}

// unwrapExecErr drops exec.Error's repetition of the program name.
func unwrapExecErr(err error) error {
	if ee, ok := err.(*exec.Error); ok {
		return ee.Err
	}
	return err
}
