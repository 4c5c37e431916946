package config

// The strict domain.toml decoder. BurntSushi/toml parses the file into a generic tree
// (so a syntax error carries its line); the walk below then checks every key against the
// schema itself rather than decoding into tagged structs and asking MetaData.Undecoded:
// BurntSushi matches struct fields case-insensitively (Name = "x" would pass for name),
// and it stops at the first wrong type, after which Undecoded reports every remaining key
// as unknown. Walking the tree finds every problem in one pass, in a stable order.

import (
	"errors"
	"fmt"
	"math"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/BurntSushi/toml"

	"github.com/seqctl/seqctl/pkg/engine"
	"github.com/seqctl/seqctl/pkg/keyspace"
	"github.com/seqctl/seqctl/pkg/redact"
)

// parseConfig is Parse with the environment injected.
func parseConfig(name string, data []byte, getenv func(string) string) (*Config, error) {
	var root map[string]any
	if _, err := toml.Decode(string(data), &root); err != nil {
		return nil, &Error{File: name, Problems: []Problem{syntaxProblem(err)}, err: err}
	}
	d := &decoder{lines: scanKeyLines(string(data)), getenv: getenv}
	cfg := d.config(root)
	if len(d.problems) > 0 {
		// Problems of the whole file (line 0) first, then in line order; the walk order
		// breaks ties, so the report is stable.
		sort.SliceStable(d.problems, func(i, j int) bool { return d.problems[i].Line < d.problems[j].Line })
		return nil, &Error{File: name, Problems: d.problems}
	}
	cfg.File = name
	cfg.lines = d.lines
	return cfg, nil
}

func syntaxProblem(err error) Problem {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		msg := pe.Message
		if pe.Usage != "" && strings.Contains(pe.Usage, "\n") {
			// The usage text is a multi-line essay; its first sentence is enough here.
			msg += "; " + strings.TrimSpace(strings.SplitN(strings.TrimSpace(pe.Usage), "\n", 2)[0])
		}
		return Problem{Line: pe.Position.Line, Message: "TOML syntax error: " + oneLine(msg) + "; fix the syntax first, other problems are reported after it parses"}
	}
	return Problem{Message: "cannot parse the file as TOML: " + oneLine(err.Error())}
}

// oneLine keeps a message on one line: a problem is printed one per line.
func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\r", `\r`)
	return strings.ReplaceAll(s, "\n", `\n`)
}

// declared remembers where a type or handler name was first declared.
type declared struct {
	kind     string // "event", "command", "handler", "process manager"
	category string
	path     keyPath
}

func (d *decoder) where(p keyPath) string {
	if line := d.lines.lookup(p); line > 0 {
		return fmt.Sprintf("%s, line %d", p, line)
	}
	return p.String()
}

// config decodes the root table.
func (d *decoder) config(root map[string]any) *Config {
	t := table{d: d, m: root}
	t.known("name", "broker", "server", "outbox", "events", "commands", "handlers", "process_managers")
	c := &Config{}
	if t.required("name", `name the bounded context, e.g. name = "shop"`) {
		c.Name, _ = t.nonEmpty("name", `name the bounded context, e.g. name = "shop"`)
	}
	c.Broker = d.broker(t)
	c.Server = d.server(t)
	if rt := c.Broker.ReplicaTimeout; rt > 0 && rt >= c.Server.Partitioning.LeaseTTL {
		d.problem(keyPath{}.key("broker").key("replica_timeout_ms"),
			"%d is not below the lease TTL (lease_ttl_ms = %d): a lease just taken could lapse while its grant waits for replicas; use about 1000, or remove the key for that default",
			rt.Milliseconds(), c.Server.Partitioning.LeaseTTL.Milliseconds())
	}
	c.Outbox = d.outbox(t)

	types := map[string]declared{}
	c.Events = d.types(t, "events", "event", types)
	c.Commands = d.types(t, "commands", "command", types)

	names := map[string]declared{}
	for _, h := range t.tables("handlers") {
		c.Handlers = append(c.Handlers, d.handler(h, types, names))
	}
	for _, p := range t.tables("process_managers") {
		c.ProcessManagers = append(c.ProcessManagers, d.processManager(p, types, names))
	}
	return c
}

func (d *decoder) broker(root table) BrokerConfig {
	b := BrokerConfig{Kind: engine.BrokerKindRedis, URL: configDefaultRedisURL}
	t, ok := root.sub("broker")
	if ok {
		t.known("kind", "url", "min_replicas", "replica_timeout_ms", "tls")
		d.replicas(t, &b)
		if tt, ok := t.sub("tls"); ok {
			b.TLS = d.brokerTLS(tt)
		}
		d.oneOf(t, "kind", &b.Kind, []string{engine.BrokerKindRedis, engine.BrokerKindRedisCluster, engine.BrokerKindInline},
			"unknown broker kind %q; use \"redis\" (partitioned, production) or \"inline\" (in process, for tests)")
		if u, ok := t.str("url"); ok {
			b.URL = u
		}
	}
	urlPath := keyPath{}.key("broker").key("url")
	source := "the URL"
	if env := d.getenv(EnvRedisURL); env != "" {
		b.URL, source = env, EnvRedisURL+" (which overrides broker.url)"
	}
	switch b.Kind {
	case engine.BrokerKindRedisCluster:
		d.clusterURL(urlPath, source, b.URL)
		if b.MinReplicas > 0 {
			d.problem(keyPath{}.key("broker").key("min_replicas"), "is not available with kind = \"redis-cluster\" (a WAIT covers one node's writes, and seqctl's are spread over every master); set it to 0, or use kind = \"redis\"")
		}
	case engine.BrokerKindRedis:
		// The URL may hold a password: problems never echo it.
		u, err := url.Parse(b.URL)
		switch {
		case err != nil:
			d.problem(urlPath, "%s is not a valid URL; write redis://HOST:PORT/DB (rediss:// for TLS)", source)
		case u.Scheme != "redis" && u.Scheme != "rediss" && u.Scheme != "unix":
			d.problem(urlPath, "%s has scheme %q; use redis://HOST:PORT/DB, rediss:// for TLS, or unix:///path/to/redis.sock", source, u.Scheme)
		case u.Scheme != "unix" && u.Host == "":
			d.problem(urlPath, "%s has no host; write redis://HOST:PORT/DB", source)
		}
	}
	return b
}

// clusterURL checks the URL of a "redis-cluster" broker: go-redis's cluster form, a
// seed address and more as addr parameters. The URL may hold a password: problems never
// echo it, and go-redis's reasons are redacted.
func (d *decoder) clusterURL(path keyPath, source, raw string) {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		d.problem(path, "%s is not a valid URL; write a Redis Cluster URL: %s", source, ClusterURLForm)
		return
	case u.Scheme != "redis" && u.Scheme != "rediss":
		d.problem(path, "%s has scheme %q; write a Redis Cluster URL: %s", source, u.Scheme, ClusterURLForm)
		return
	case u.Host == "":
		d.problem(path, "%s has no host; write a Redis Cluster URL: %s", source, ClusterURLForm)
		return
	}
	if _, err := ParseClusterURL(raw); err != nil {
		d.problem(path, "%s is not a Redis Cluster URL (%s); write %s", source, strings.TrimPrefix(redact.Error(err, raw).Error(), "redis: "), ClusterURLForm)
	}
}

// brokerTLS decodes [broker.tls] and reads its files, so a missing CA or a key that
// does not fit its certificate is reported with the config, naming the key and the path.
func (d *decoder) brokerTLS(t table) TLSConfig {
	t.known("ca_file", "cert_file", "key_file", "server_name", "min_version", "insecure_skip_verify")
	var c TLSConfig
	for _, f := range []struct {
		key string
		dst *string
	}{{TLSSettingCA, &c.CAFile}, {TLSSettingCert, &c.CertFile}, {TLSSettingKey, &c.KeyFile}, {TLSSettingServerName, &c.ServerName}, {TLSSettingMinVersion, &c.MinVersion}} {
		if v, ok := t.nonEmpty(f.key, "remove the key for the default"); ok {
			*f.dst = v
		}
	}
	if v, ok := t.boolean("insecure_skip_verify"); ok {
		c.InsecureSkipVerify = v
	}
	if _, err := c.ClientConfig(""); err != nil {
		var te *TLSError
		if errors.As(err, &te) {
			msg := te.Message
			if te.Path != "" {
				msg = fmt.Sprintf("%q %s", te.Path, te.Message)
			}
			d.problem(t.path.key(te.Setting), "%s", msg)
		} else {
			d.problem(t.path, "%v", err)
		}
	}
	return c
}

// replicas decodes [broker] min_replicas and replica_timeout_ms.
func (d *decoder) replicas(t table, b *BrokerConfig) {
	d.integerIn(t, "min_replicas", 0, math.MaxInt32, "", &b.MinReplicas,
		"must be 0 (do not wait for replicas, the default) or the number of replicas that must acknowledge each lease grant, operator action and outbox append, got %d")
	if ms, ok := t.integer("replica_timeout_ms"); ok {
		d.millis(t, "replica_timeout_ms", ms, "1000", &b.ReplicaTimeout)
	}
}

func (d *decoder) server(root table) ServerConfig {
	s := ServerConfig{
		Partitioning:  DefaultPartitioningConfig(),
		PriorityLanes: PriorityLanes{BackfillSuffix: engine.DefaultBackfillSuffix},
	}
	t, ok := root.sub("server")
	if !ok {
		return s
	}
	t.known("partitioning", "priority_lanes", "max_concurrent_handlers")
	d.concurrency(t, "max_concurrent_handlers", "no cap beyond each handler's max_concurrent", &s.MaxConcurrentHandlers)
	if pt, ok := t.sub("partitioning"); ok {
		d.partitioning(pt, &s.Partitioning)
	}
	if pl, ok := t.sub("priority_lanes"); ok {
		pl.known("enabled", "threshold", "backfill_suffix")
		if b, ok := pl.boolean("enabled"); ok {
			s.PriorityLanes.Enabled = b
		}
		d.integerIn(pl, "threshold", math.MinInt32, math.MaxInt32, "; priorities are 32-bit integers", &s.PriorityLanes.Threshold,
			"%d is out of range; priorities are 32-bit integers")
		if sfx, ok := pl.nonEmpty("backfill_suffix", `omit the key for the default "backfill"`); ok {
			if err := engine.ValidateBackfillSuffix(sfx); err != nil {
				d.problem(pl.path.key("backfill_suffix"), "%v; it becomes the last segment of {category}:{key}:{suffix}, pick a plain word such as \"backfill\" or \"slow\"", err)
			} else {
				s.PriorityLanes.BackfillSuffix = sfx
			}
		}
	}
	return s
}

// maxMillis is the largest millisecond count that fits a time.Duration.
const maxMillis = math.MaxInt64 / int64(time.Millisecond)

// oneOf decodes a string key whose value must be one of allowed into dst; problem is the
// message for another value (with %q for it).
func (d *decoder) oneOf(t table, key string, dst *string, allowed []string, problem string) {
	v, ok := t.str(key)
	if !ok {
		return
	}
	if slices.Contains(allowed, v) {
		*dst = v
		return
	}
	d.problem(t.path.key(key), problem, v)
}

func (d *decoder) partitioning(t table, p *PartitioningConfig) {
	t.known("lease_ttl_ms", "heartbeat_interval_seconds", "poll_interval_seconds", "reap_idle_ms", "sweep_interval_seconds", "keyspace_notifications", "max_partitions_warning", "max_unacked")
	ttlOK := true
	if ms, ok := t.integer("lease_ttl_ms"); ok {
		ttlOK = d.millis(t, "lease_ttl_ms", ms, "15000", &p.LeaseTTL)
	} else if t.has("lease_ttl_ms") {
		ttlOK = false
	}
	hbOK := true
	if secs, ok := t.number("heartbeat_interval_seconds"); ok {
		hbOK = d.seconds(t, "heartbeat_interval_seconds", secs, "lease_ttl_ms / 5000, i.e. 3", &p.HeartbeatInterval)
	} else if t.has("heartbeat_interval_seconds") {
		hbOK = false
	} else {
		p.HeartbeatInterval = p.LeaseTTL / 5
	}
	if ttlOK && hbOK && t.has("heartbeat_interval_seconds") && p.HeartbeatInterval >= p.LeaseTTL {
		d.problem(t.path.key("heartbeat_interval_seconds"),
			"%v is not below the lease TTL of %v (lease_ttl_ms = %d), so a live owner would let its leases lapse; use about lease_ttl_ms / 5000 = %s, or remove the key for that default",
			p.HeartbeatInterval, p.LeaseTTL, p.LeaseTTL.Milliseconds(), strconv.FormatFloat((p.LeaseTTL/5).Seconds(), 'g', -1, 64))
	}
	if secs, ok := t.number("poll_interval_seconds"); ok {
		d.seconds(t, "poll_interval_seconds", secs, "0.25", &p.PollInterval)
	}
	if ms, ok := t.integer("reap_idle_ms"); ok {
		d.millis(t, "reap_idle_ms", ms, "3600000", &p.ReapIdle)
	}
	if secs, ok := t.number("sweep_interval_seconds"); ok {
		d.seconds(t, "sweep_interval_seconds", secs, "2", &p.SweepInterval)
	}
	d.oneOf(t, "keyspace_notifications", &p.KeyspaceNotifications, []string{engine.KeyspaceAuto, engine.KeyspaceUse, engine.KeyspaceOff},
		"is %q; want \"auto\" (the default: turn Redis keyspace notifications for streams on where allowed), \"use\" (only where they are on) or \"off\"")
	d.integerIn(t, "max_unacked", 1, 1<<16, " (at most 65536)", &p.MaxUnacked,
		"must be 1 or more, got %d; 1 (the default) re-runs at most the event in flight after a failure, N lets up to N handled events run again")
	d.integerIn(t, "max_partitions_warning", 0, math.MaxInt32, "", &p.MaxPartitionsWarning,
		"must be 0 (no warning) or a positive partition count, got %d; the default is 2000")
}

// integerIn decodes an integer key into out when it lies between lo and hi. A value
// below lo is reported with the format below, whose first verb is the value and whose
// other verbs take args; a value above hi as "N is out of range" followed by note.
func (d *decoder) integerIn(t table, key string, lo, hi int64, note string, out *int, below string, args ...any) {
	n, ok := t.integer(key)
	if !ok {
		return
	}
	switch {
	case n < lo:
		d.problem(t.path.key(key), below, append([]any{n}, args...)...)
	case n > hi:
		d.problem(t.path.key(key), "%d is out of range%s", n, note)
	default:
		*out = int(n)
	}
}

// concurrency decodes a positive count of handler calls running at once.
func (d *decoder) concurrency(t table, key, def string, out *int) {
	d.integerIn(t, key, 1, math.MaxInt32, "", out,
		"must be a positive number of handler calls running at once, got %d; remove the key for the default (%s)", def)
}

func (d *decoder) millis(t table, key string, ms int64, def string, out *time.Duration) bool {
	switch {
	case ms <= 0:
		d.problem(t.path.key(key), "must be a positive number of milliseconds, got %d; the default is %s", ms, def)
		return false
	case ms > maxMillis:
		d.problem(t.path.key(key), "%d milliseconds is too long to represent; the default is %s", ms, def)
		return false
	}
	*out = time.Duration(ms) * time.Millisecond
	return true
}

func (d *decoder) seconds(t table, key string, secs float64, def string, out *time.Duration) bool {
	ns := secs * float64(time.Second)
	switch {
	case math.IsNaN(secs) || math.IsInf(secs, 0):
		d.problem(t.path.key(key), "must be a finite number of seconds, got %v; the default is %s", secs, def)
		return false
	case secs <= 0:
		d.problem(t.path.key(key), "must be a positive number of seconds, got %v; the default is %s", secs, def)
		return false
	case ns < 1:
		d.problem(t.path.key(key), "%v seconds is below a nanosecond; the default is %s", secs, def)
		return false
	case ns >= math.MaxInt64:
		d.problem(t.path.key(key), "%v seconds is too long to represent; the default is %s", secs, def)
		return false
	}
	*out = time.Duration(ns)
	return true
}

func (d *decoder) outbox(root table) *OutboxConfig {
	if !root.has("outbox") {
		return nil
	}
	t, ok := root.sub("outbox")
	if !ok {
		return nil
	}
	t.known("dsn")
	o := &OutboxConfig{}
	source := "the DSN"
	if env := d.getenv(EnvOutboxDSN); env != "" {
		o.DSN, source = env, EnvOutboxDSN+" (which overrides outbox.dsn)"
		if t.has("dsn") {
			t.str("dsn") // still type-checked
		}
	} else if t.required("dsn", `write dsn = "sqlite://outbox.db" or "postgres://USER@HOST:5432/DB", set `+EnvOutboxDSN+`, or remove [outbox] to run without the relay`) {
		o.DSN, _ = t.str("dsn")
	} else {
		return o
	}
	// The DSN may hold a password: problems never echo it.
	scheme, _, found := strings.Cut(o.DSN, "://")
	if !found || (scheme != "sqlite" && scheme != "postgres" && scheme != "postgresql") {
		d.problem(t.path.key("dsn"), `%s must start with sqlite:// or postgres://, e.g. "sqlite://outbox.db" or "postgres://USER@HOST:5432/DB"`, source)
	}
	return o
}

// types decodes [[events]] or [[commands]].
func (d *decoder) types(root table, key, kind string, seen map[string]declared) []TypeConfig {
	var out []TypeConfig
	for _, t := range root.tables(key) {
		t.known("name", "category", "fields")
		var tc TypeConfig
		nameOK := false
		if t.required("name", fmt.Sprintf(`every %s has a name, e.g. name = "OrderPlaced"`, kind)) {
			tc.Name, nameOK = t.nonEmpty("name", fmt.Sprintf("every %s has a name", kind))
		}
		catOK := false
		if t.required("category", fmt.Sprintf(`every %s has a category, the stream it is published to, e.g. category = "order"`, kind)) {
			if tc.Category, catOK = t.str("category"); catOK {
				if err := engine.ValidateCategory(tc.Category); err != nil {
					d.problem(t.path.key("category"), "%v; %s", err, categoryHint(tc.Category))
					catOK = false
				}
			}
		}
		if fields, ok := t.strs("fields"); ok {
			tc.Fields = fields
			dup := map[string]bool{}
			for i, f := range fields {
				switch {
				case f == "":
					d.problem(t.path.key("fields").index(i), "is empty; a field is a top-level key of the JSON payload")
				case dup[f]:
					d.problem(t.path.key("fields").index(i), "field %q is listed twice", f)
				}
				dup[f] = true
			}
		}
		if nameOK {
			if prev, dup := seen[tc.Name]; dup {
				switch {
				case prev.kind != kind:
					d.problem(t.path.key("name"), "%q is already declared as %s %s (%s); events and commands share one namespace: rename one", tc.Name, article(prev.kind), prev.kind, d.where(prev.path))
				case catOK && prev.category != tc.Category:
					d.problem(t.path.key("category"), "%s %q is already declared in category %q (%s); a type belongs to exactly one category: remove one declaration or rename the type", kind, tc.Name, prev.category, d.where(prev.path))
				default:
					d.problem(t.path.key("name"), "%s %q is declared twice (first at %s); remove one", kind, tc.Name, d.where(prev.path))
				}
			} else {
				seen[tc.Name] = declared{kind: kind, category: tc.Category, path: t.path}
			}
		}
		out = append(out, tc)
	}
	return out
}

// categoryHint suggests a well-formed category name.
func categoryHint(c string) string {
	if c == "" {
		return `name the stream category, e.g. category = "order"`
	}
	fixed := strings.Map(func(r rune) rune {
		if r == ':' || unicode.IsSpace(r) {
			return '_'
		}
		return r
	}, c)
	fixed = strings.Trim(fixed, "_")
	if fixed == "" || engine.ValidateCategory(fixed) != nil {
		return `use a plain name such as "order"`
	}
	return fmt.Sprintf("use a plain name such as %q", fixed)
}

// name decodes and registers the name of a handler or process manager.
func (d *decoder) name(t table, kind string, names map[string]declared) string {
	if !t.required("name", fmt.Sprintf(`every %s has a name; it is also its consumer group`, kind)) {
		return ""
	}
	n, ok := t.nonEmpty("name", fmt.Sprintf("every %s has a name; it is also its consumer group", kind))
	if !ok {
		return ""
	}
	if prev, dup := names[n]; dup {
		d.problem(t.path.key("name"), "%q is already the name of a %s (%s); handler and process-manager names are consumer groups and must be unique", n, prev.kind, d.where(prev.path))
	} else {
		names[n] = declared{kind: kind, path: t.path}
	}
	return n
}

// retries decodes max_retries and retry_delay.
func (d *decoder) retries(t table) (int, time.Duration) {
	maxRetries, delay := engine.DefaultMaxRetries, engine.DefaultRetryDelay
	d.integerIn(t, "max_retries", 1, math.MaxInt32, "", &maxRetries,
		"must be at least 1 (the number of attempts before the partition halts), got %d; the default is %d", engine.DefaultMaxRetries)
	if dur, ok := t.duration("retry_delay"); ok {
		delay = dur
	}
	return maxRetries, delay
}

func (d *decoder) handler(t table, types, names map[string]declared) HandlerConfig {
	t.known("name", "kind", "part_of", "handles", "sequential_by", "limit_by", "limit_concurrency", "limit_rate", "batch_max", "batch_wait", "max_retries", "retry_delay", "deliver")
	h := HandlerConfig{Kind: engine.EventHandlerKind}
	h.Name = d.name(t, "handler", names)
	kindOK := true
	if k, ok := t.str("kind"); ok {
		switch k {
		case "event":
			h.Kind = engine.EventHandlerKind
		case "command":
			h.Kind = engine.CommandHandlerKind
		default:
			d.problem(t.path.key("kind"), "unknown handler kind %q; use \"event\" (the default) or \"command\"", k)
			kindOK = false
		}
	} else if t.has("kind") {
		kindOK = false
	}
	if p, ok := t.str("part_of"); ok {
		if err := engine.ValidateCategory(p); err != nil {
			d.problem(t.path.key("part_of"), "%v; %s", err, categoryHint(p))
		}
		h.PartOf = p
	}
	noun := h.Kind.String()
	if t.required("handles", fmt.Sprintf(`list the %s types it handles, e.g. handles = ["OrderPlaced"]`, noun)) {
		if hs, ok := t.strs("handles"); ok {
			if len(hs) == 0 {
				d.problem(t.path.key("handles"), "is empty; list the %s types the handler handles", noun)
			}
			h.Handles = hs
			listed := map[string]bool{}
			for i, name := range hs {
				if listed[name] {
					d.problem(t.path.key("handles").index(i), "%q is listed twice", name)
				}
				listed[name] = true
				if kindOK {
					d.checkHandled(t.path.key("handles").index(i), name, noun, types)
				}
			}
		}
	}
	if s, ok := t.nonEmpty("sequential_by", "name a payload field, or remove the key to leave the category unpartitioned"); ok {
		h.SequentialBy = s
	}
	h.Limit = d.limit(t)
	if kindOK && h.Kind == engine.CommandHandlerKind {
		d.notBatched(t, "a command handler dispatches one command at a time, synchronously")
	} else {
		h.BatchMax, h.BatchWait = d.batch(t)
	}
	h.MaxRetries, h.RetryDelay = d.retries(t)
	if dt, ok := t.sub("deliver"); ok {
		h.Deliver = d.deliver(dt)
	}
	return h
}

// limit reads a handler's limit key: limit_by, limit_concurrency and limit_rate. Whether
// they go together is a registration rule (engine.Domain.Init), reported with the rest.
func (d *decoder) limit(t table) engine.HandlerLimit {
	var l engine.HandlerLimit
	if s, ok := t.nonEmpty("limit_by", "name the payload field whose values are capped (a tenant id, say), or remove the key"); ok {
		l.By = s
	}
	if t.has("limit_concurrency") {
		d.integerIn(t, "limit_concurrency", 1, math.MaxInt32, "", &l.Concurrency,
			"must be a positive number of runs at once per value of limit_by, got %d; remove the key for no cap")
	}
	if s, ok := t.str("limit_rate"); ok {
		n, per, err := keyspace.ParseRate(s)
		if err != nil {
			d.problem(t.path.key("limit_rate"), "%v", err)
		} else {
			l.Rate, l.Per = n, per
		}
	}
	return l
}

// batch reads an event handler's batch_max and batch_wait. That batch_wait needs a
// batch_max above 1 is checked here too (engine.Domain.Init checks it again), so that the
// problem points at the key.
func (d *decoder) batch(t table) (n int, wait time.Duration) {
	d.integerIn(t, "batch_max", 1, engine.MaxBatch, fmt.Sprintf("; a call takes at most %d events: use 1 (one event per call, the default) up to %d", engine.MaxBatch, engine.MaxBatch), &n,
		"must be 1 (one event per call, the default) or more, got %d; up to %d consecutive events of one key go in one call", engine.MaxBatch)
	v, ok := t.m["batch_wait"]
	if !ok {
		return n, 0
	}
	s, ok := v.(string)
	if !ok {
		t.wrongType("batch_wait", `a duration string such as "20ms"`, v)
		return n, 0
	}
	wait, err := time.ParseDuration(s)
	switch {
	case err != nil:
		d.problem(t.path.key("batch_wait"), "%q is not a duration; write a number with a unit: \"5ms\", \"20ms\", \"1s\"", s)
		return n, 0
	case wait < 0:
		d.problem(t.path.key("batch_wait"), "is negative (%q); use \"0s\" (never wait to fill a batch, the default) or a wait such as \"20ms\"", s)
		return n, 0
	case wait > 0 && (n == 1 || !t.has("batch_max")): // a batch_max with a problem is reported alone
		d.problem(t.path.key("batch_wait"), "waits %v to fill batches, but batch_max is %d (one event per call): set batch_max above 1, or remove batch_wait", wait, max(n, 1))
		return n, 0
	}
	return n, wait
}

// notBatched reports batch_max and batch_wait on a table that cannot take batches;
// why says why not.
func (d *decoder) notBatched(t table, why string) {
	for _, key := range []string{"batch_max", "batch_wait"} {
		if t.has(key) {
			d.problem(t.path.key(key), "applies to event handlers only: %s; remove %s", why, key)
		}
	}
}

// checkHandled reports a handled type name that is not declared with the right kind.
func (d *decoder) checkHandled(p keyPath, name, want string, types map[string]declared) {
	decl, ok := types[name]
	switch {
	case ok && decl.kind == want:
		return
	case ok && want == "event" && p.isPMHandle():
		d.problem(p, "%q is a command (%s); process managers handle events only", name, d.where(decl.path))
	case ok && want == "event":
		d.problem(p, "%q is a command (%s); set kind = \"command\" on a command handler, or name an event", name, d.where(decl.path))
	case ok:
		d.problem(p, "%q is an event (%s), but this is a command handler; name a command, or set kind = \"event\"", name, d.where(decl.path))
	default:
		var same []string
		for n, dcl := range types {
			if dcl.kind == want {
				same = append(same, n)
			}
		}
		hint := fmt.Sprintf("declare it in a [[%ss]] table, or fix the name", want)
		if s := suggest(name, same); s != "" {
			hint = fmt.Sprintf("did you mean %q?", s)
		}
		d.problem(p, "%q is not a declared %s; %s", name, want, hint)
	}
}

func (d *decoder) deliver(t table) *DeliverConfig {
	t.known("http", "exec", "sql", "timeout", "max_concurrent", "signing_secret_env", "signing_key_env", "signing_key_file", "signing_previous_key_env", "signing_previous_key_file")
	dc := &DeliverConfig{Timeout: configDefaultDeliverTimeout}
	hasHTTP, hasExec, hasSQL := t.has("http"), t.has("exec"), t.has("sql")
	switch {
	case hasHTTP && hasExec:
		d.problem(t.path, "sets both http and exec; a handler is delivered one way: keep one of them")
	case hasSQL && hasHTTP:
		d.problem(t.path, "sets both http and a sql table; a handler is delivered one way: keep one of them")
	case hasSQL && hasExec:
		d.problem(t.path, "sets both exec and a sql table; a handler is delivered one way: keep one of them")
	case !hasHTTP && !hasExec && !hasSQL:
		d.problem(t.path, "sets neither http nor exec nor a sql table; set one of them, or remove the deliver table when Go code registers the handler")
	}
	if st, ok := t.sub("sql"); ok {
		dc.SQL = d.sqlSink(st)
	}
	if u, ok := t.str("http"); ok {
		dc.HTTP = u
		pu, err := url.Parse(u)
		switch {
		case u == "":
			d.problem(t.path.key("http"), `is empty; write the endpoint URL, e.g. http = "http://127.0.0.1:8080/orders"`)
		case err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "":
			d.problem(t.path.key("http"), `%q is not an http:// or https:// URL with a host, e.g. "http://127.0.0.1:8080/orders"`, redact.URL(u))
		}
	}
	if argv, ok := t.strs("exec"); ok {
		dc.Exec = argv
		if len(argv) == 0 || argv[0] == "" {
			d.problem(t.path.key("exec"), `needs a program to run: exec = ["./bin/handler", "--flag"]`)
		}
	}
	if dur, ok := t.duration("timeout"); ok {
		dc.Timeout = dur
	}
	d.concurrency(t, "max_concurrent", fmt.Sprintf("%d for exec (twice the cores), %d for http", DefaultExecConcurrency, DefaultHTTPConcurrency), &dc.MaxConcurrent)
	if _, ok := t.str("signing_secret_env"); ok {
		d.problem(t.path.key("signing_secret_env"), "was replaced by signing_key_env (the same environment variable name works): requests are now signed over the method, path, X-Seq-* headers, X-Seq-Timestamp and the body, in a new X-Seq-Signature format; update the receivers' verification (docs/delivery.md, Signing), then rename the key")
	}
	envKey := func(key string) string {
		env, ok := t.str(key)
		if ok && !isEnvName(env) {
			d.problem(t.path.key(key), "%q is not an environment variable name (letters, digits and _, not starting with a digit); name the variable that holds the key, not the key", env)
		}
		return env
	}
	fileKey := func(key string) string {
		f, ok := t.str(key)
		if ok && f == "" {
			d.problem(t.path.key(key), "is empty; name the file that holds the signing key")
		}
		return f
	}
	dc.SigningKeyEnv, dc.SigningKeyFile = envKey("signing_key_env"), fileKey("signing_key_file")
	dc.SigningPreviousKeyEnv, dc.SigningPreviousKeyFile = envKey("signing_previous_key_env"), fileKey("signing_previous_key_file")
	switch {
	case dc.SigningKeyEnv != "" && dc.SigningKeyFile != "":
		d.problem(t.path.key("signing_key_file"), "sets the signing key twice (signing_key_env and signing_key_file); keep one of them")
	case dc.SigningPreviousKeyEnv != "" && dc.SigningPreviousKeyFile != "":
		d.problem(t.path.key("signing_previous_key_file"), "sets the previous signing key twice (signing_previous_key_env and signing_previous_key_file); keep one of them")
	case (dc.SigningPreviousKeyEnv != "" || dc.SigningPreviousKeyFile != "") && !dc.Signed():
		d.problem(t.path, "sets a previous signing key but no signing key; during a rotation the new key goes in signing_key_env or signing_key_file and the old one in signing_previous_key_*")
	}
	if dc.Signed() && hasExec {
		d.problem(t.path, "signs requests, but exec handlers are not signed; remove the signing_* keys")
	}
	if dc.Signed() && hasSQL {
		d.problem(t.path, "signs requests, but a sql sink sends none; remove the signing_* keys")
	}
	return dc
}

// sqlSink decodes a [handlers.deliver.sql] table.
func (d *decoder) sqlSink(t table) *SQLSinkConfig {
	t.known("dsn", "dsn_env", "dsn_file", "statement", "inbox_table")
	sc := &SQLSinkConfig{Table: DefaultInboxTable}
	if t.has("dsn") {
		d.problem(t.path.key("dsn"), "would put the database password in domain.toml; name the environment variable that holds the DSN (dsn_env) or a file that holds it (dsn_file)")
	}
	if env, ok := t.str("dsn_env"); ok {
		sc.DSNEnv = env
		if !isEnvName(env) {
			d.problem(t.path.key("dsn_env"), "is not an environment variable name (letters, digits and _, not starting with a digit); name the variable that holds the DSN, not the DSN")
		}
	}
	if f, ok := t.str("dsn_file"); ok {
		sc.DSNFile = f
		if f == "" {
			d.problem(t.path.key("dsn_file"), "is empty; name the file that holds the DSN")
		}
	}
	switch {
	case sc.DSNEnv != "" && sc.DSNFile != "":
		d.problem(t.path.key("dsn_file"), "sets the DSN twice (dsn_env and dsn_file); keep one of them")
	case !t.has("dsn_env") && !t.has("dsn_file") && !t.has("dsn"):
		d.problem(t.path, `names no database; set dsn_env = "ORDERS_DB" (the environment variable that holds the DSN) or dsn_file`)
	}
	if !t.has("statement") {
		d.problem(t.path, `has no statement; write the SQL run for each event, e.g. statement = "INSERT INTO orders(id) VALUES ($1::jsonb->>'order_id') ON CONFLICT DO NOTHING"`)
	} else if st, ok := t.nonEmpty("statement", "write the SQL run for each event"); ok {
		sc.Statement = st
	}
	if tb, ok := t.str("inbox_table"); ok {
		sc.Table = tb
		if !sqlIdentifier.MatchString(tb) {
			d.problem(t.path.key("inbox_table"), "%q is not a lower-case SQL identifier of at most 40 bytes ([a-z_][a-z0-9_]*)", tb)
		}
	}
	return sc
}

// sqlIdentifier is what a table name seqctl creates may be.
var sqlIdentifier = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,39}$`)

func isEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_', r >= 'A' && r <= 'Z', r >= 'a' && r <= 'z':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

func (d *decoder) processManager(t table, types, names map[string]declared) ProcessManagerConfig {
	t.known("name", "sequential_by", "max_retries", "retry_delay", "deliver", "handles", "batch_max", "batch_wait")
	p := ProcessManagerConfig{}
	p.Name = d.name(t, "process manager", names)
	d.notBatched(t, "a process manager takes its events one at a time, since each may change the state the next one reads")
	if v, ok := t.m["sequential_by"]; ok {
		if b, ok := v.(bool); ok {
			p.SequentialBy = b
		} else {
			d.problem(t.path.key("sequential_by"), "must be true or false on a process manager, not %s; each subscribed category is partitioned by the field its correlate spec names", describe(v))
		}
	}
	p.MaxRetries, p.RetryDelay = d.retries(t)
	if dt, ok := t.sub("deliver"); ok {
		p.Deliver = d.deliver(dt)
	}
	if !t.required("handles", "add a [[process_managers.handles]] table per event it handles") {
		return p
	}
	hs := t.tables("handles")
	if len(hs) == 0 {
		if _, isArr := t.m["handles"].([]any); isArr {
			d.problem(t.path.key("handles"), "is empty; add a [[process_managers.handles]] table per event it handles")
		}
	}
	for _, h := range hs {
		h.known("event", "correlate", "start")
		ph := PMHandleConfig{}
		if h.required("event", `name the handled event, e.g. event = "PaymentConfirmed"`) {
			if ev, ok := h.nonEmpty("event", "name the handled event"); ok {
				ph.Event = ev
				d.checkHandled(h.path.key("event"), ev, "event", types)
			}
		}
		if h.required("correlate", `write correlate = "order_id", or correlate = { order_id = "order_ref" } when the event names the field differently`) {
			if c, err := decodeCorrelate(h.m["correlate"]); err != nil {
				d.problem(h.path.key("correlate"), "%v", err)
			} else {
				ph.Correlate = c
			}
		}
		if b, ok := h.boolean("start"); ok {
			ph.Start = b
		}
		p.Handles = append(p.Handles, ph)
	}
	return p
}
