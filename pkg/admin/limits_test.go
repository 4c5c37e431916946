package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/internal/enginetest"
	"github.com/seqctl/seqctl/internal/redistest"
	"github.com/seqctl/seqctl/internal/testkit"
	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/engine"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// projectorLimit is the limit key the tests' config gives the Projector: two runs at
// once and 20 starts a second per tenant.
var projectorLimit = engine.HandlerLimit{By: "tenant", Concurrency: 2, Rate: 20, Per: time.Second}

// limitOptions are the Options a config with a limited Projector and a Mailer without a
// limit key gives.
func limitOptions() admin.Options {
	return admin.Options{
		Limits:   map[string]engine.HandlerLimit{"Projector": projectorLimit},
		Declared: map[string][]string{"order": {"Projector", "Mailer"}},
	}
}

func caps(concurrency int, rate string) *admin.LimitCaps {
	return &admin.LimitCaps{Concurrency: concurrency, Rate: rate}
}

// Set, get, list and clear an override through the admin: each set replaces the
// value's override as a whole, the effective caps fall back on the domain's where the
// override leaves them, and every attempt, refused or not, is in the audit log with the
// value, the old and new caps and the reason.
func TestLimitOverrides(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	adm := admin.New(rdb, limitOptions())
	actor := admin.Actor{User: "ops", Host: "laptop", Command: "limits set"}
	set := func(r admin.LimitRequest) (*admin.LimitResult, error) {
		r.Handler, r.Value, r.Actor = "Projector", "acme", actor
		if r.Reason == "" {
			r.Reason = "acme's big import, OPS-7"
		}
		return adm.SetLimit(ctx, r)
	}

	res, err := set(admin.LimitRequest{Concurrency: 5})
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != admin.OutcomeOK || res.Old != nil || res.New == nil || res.New.Concurrency != 5 || res.New.By != "ops@laptop" ||
		res.New.Since.IsZero() || !cmp.Equal(res.Before, caps(2, "20/s")) || !cmp.Equal(res.After, caps(5, "20/s")) {
		t.Fatalf("set = %+v (new %+v, before %+v, after %+v)", res, res.New, res.Before, res.After)
	}
	got, err := adm.Limit(ctx, "Projector", "acme")
	if err != nil {
		t.Fatal(err)
	}
	zero := 0
	want := &admin.Limit{Handler: "Projector", Value: "acme", By: "tenant", Default: caps(2, "20/s"), Override: res.New,
		Effective: caps(5, "20/s"), Use: admin.LimitUsage{Starts: &zero}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("get (-want +got):\n%s", diff)
	}

	res, err = set(admin.LimitRequest{Rate: 50, Per: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if res.Old == nil || res.Old.Concurrency != 5 || res.New.Concurrency != 0 || !cmp.Equal(res.After, caps(2, "50/s")) {
		t.Fatalf("a set did not replace the override as a whole: old %+v, new %+v, after %+v", res.Old, res.New, res.After)
	}
	if res, err = set(admin.LimitRequest{Off: true}); err != nil || !cmp.Equal(res.After, &admin.LimitCaps{Off: true}) {
		t.Fatalf("off: %v, after %+v", err, res)
	}
	list, err := adm.Limits(ctx, admin.LimitQuery{})
	if err != nil || len(list) != 1 || list[0].Value != "acme" || !list[0].Effective.Off || list[0].Use.Starts != nil {
		t.Fatalf("list = %+v, %v", list, err)
	}
	clear := admin.LimitRequest{Handler: "Projector", Value: "acme", Reason: "import done", Actor: admin.Actor{User: "ops", Host: "laptop", Command: "limits clear"}}
	res, err = adm.ClearLimit(ctx, clear)
	if err != nil || res.New != nil || !res.Old.Off || !cmp.Equal(res.After, caps(2, "20/s")) {
		t.Fatalf("clear = %+v, %v", res, err)
	}
	if list, err := adm.Limits(ctx, admin.LimitQuery{}); err != nil || len(list) != 0 {
		t.Fatalf("list after the clear = %+v, %v", list, err)
	}

	refusals := []struct {
		name    string
		call    func() error
		want    error
		outcome string
	}{
		{"no override to clear", func() error { _, err := adm.ClearLimit(ctx, clear); return err }, engine.ErrNoOverride, admin.OutcomeNotFound},
		{"a handler without limit_by", func() error {
			_, err := adm.SetLimit(ctx, admin.LimitRequest{Handler: "Mailer", Value: "acme", Concurrency: 1, Reason: "r", Actor: actor})
			return err
		}, admin.ErrNoLimit, admin.OutcomeFailed},
		{"an unknown handler", func() error {
			_, err := adm.SetLimit(ctx, admin.LimitRequest{Handler: "Nope", Value: "acme", Concurrency: 1, Reason: "r", Actor: actor})
			return err
		}, admin.ErrNotFound, admin.OutcomeNotFound},
		{"an invalid value", func() error {
			_, err := adm.SetLimit(ctx, admin.LimitRequest{Handler: "Projector", Value: "a:b", Concurrency: 1, Reason: "r", Actor: actor})
			return err
		}, engine.ErrInvalidKey, admin.OutcomeFailed},
	}
	for _, r := range refusals {
		if err := r.call(); !errors.Is(err, r.want) || admin.OutcomeOf(err) != r.outcome {
			t.Errorf("%s: err = %v (outcome %s), want %v (%s)", r.name, err, admin.OutcomeOf(err), r.want, r.outcome)
		}
	}
	var nl *admin.NoLimitError
	if _, err := adm.Limit(ctx, "Mailer", "acme"); !errors.As(err, &nl) ||
		err.Error() != "handler Mailer has no limit_by: an override caps nothing until its [[handlers]] entry in domain.toml sets limit_by with limit_concurrency or limit_rate; the handlers with a limit key are Projector" {
		t.Errorf("get of a handler without limit_by: %v", err)
	}
	for _, r := range []admin.LimitRequest{{Concurrency: 1, Reason: " "}, {Off: true, Concurrency: 1}, {}, {Concurrency: -1}} {
		if r.Reason == "" {
			r.Reason = "r"
		}
		if _, err := set(r); err == nil {
			t.Errorf("set %+v was accepted", r)
		}
	}

	audit, err := adm.AuditEntries(ctx, admin.AuditQuery{Limit: 12})
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for i := len(audit) - 1; i >= 0; i-- {
		e := audit[i]
		lines = append(lines, e.Command+" "+e.Handler+" "+e.Value+" "+e.Outcome+" | "+e.Detail+" | "+e.Reason)
	}
	wantAudit := []string{
		"limits set Projector acme ok | override none -> concurrency 5; caps concurrency 2, rate 20/s -> concurrency 5, rate 20/s | acme's big import, OPS-7",
		"limits set Projector acme ok | override concurrency 5 -> rate 50/s; caps concurrency 5, rate 20/s -> concurrency 2, rate 50/s | acme's big import, OPS-7",
		"limits set Projector acme ok | override rate 50/s -> off; caps concurrency 2, rate 50/s -> no cap | acme's big import, OPS-7",
		"limits clear Projector acme ok | override off -> none; caps no cap -> concurrency 2, rate 20/s | import done",
		"limits clear Projector acme not_found | engine: no override of the limit for this value: acme of Projector | import done",
	}
	if len(lines) < len(wantAudit) {
		t.Fatalf("audit log = %q", lines)
	}
	if diff := cmp.Diff(wantAudit, lines[:len(wantAudit)]); diff != "" {
		t.Errorf("audit log (-want +got):\n%s", diff)
	}
	if n := len(lines) - len(wantAudit); n != 7 {
		t.Errorf("%d refused attempts recorded, want 7: %q", n, lines[len(wantAudit):])
	}
}

// Without a config the domain's caps are unknown: the effective caps are told only when
// the override settles both, and a handler is known by the group registries.
func TestLimitWithoutConfig(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	if err := rdb.SAdd(ctx, keyspace.SingleNode.GroupRegistry("order"), "Projector").Err(); err != nil {
		t.Fatal(err)
	}
	adm := admin.New(rdb, admin.Options{})
	if adm.HandlerLimits() != nil {
		t.Errorf("handler limits without a config: %v", adm.HandlerLimits())
	}
	req := admin.LimitRequest{Handler: "Projector", Value: "acme", Concurrency: 3, Reason: "r", Actor: admin.Actor{User: "ops"}}
	res, err := adm.SetLimit(ctx, req)
	if err != nil || res.Default != nil || res.Before != nil || res.After != nil {
		t.Fatalf("set = %+v, %v", res, err)
	}
	l, err := adm.Limit(ctx, "Projector", "acme")
	if err != nil || l.Default != nil || l.Effective != nil || l.Override.Concurrency != 3 || l.Use.Starts != nil {
		t.Fatalf("get = %+v, %v", l, err)
	}
	req.Concurrency, req.Rate, req.Per = 3, 600, time.Minute
	if _, err := adm.SetLimit(ctx, req); err != nil {
		t.Fatal(err)
	}
	if l, err = adm.Limit(ctx, "Projector", "acme"); err != nil || !cmp.Equal(l.Effective, caps(3, "600/m")) || l.Use.Starts == nil {
		t.Fatalf("get of an override that settles both caps = %+v, %v", l, err)
	}
	if list, err := adm.Limits(ctx, admin.LimitQuery{}); err != nil || len(list) != 1 || list[0].Handler != "Projector" {
		t.Fatalf("list finds the handlers with an override: %+v, %v", list, err)
	}
	if _, err := adm.Limit(ctx, "Nope", "acme"); !errors.Is(err, admin.ErrNotFound) {
		t.Errorf("an unregistered handler: %v", err)
	}
}

// A partition whose owner waits for a permit of its handler's limit key lists as
// throttled, with the value, after its owner's next heartbeat; inspect says so, the
// value lists with its waiting partition and the permit held; once the permit is free
// the partition runs.
func TestThrottledPartitions(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	w := startLimited(t, rdb, rdb)
	adm := admin.New(rdb, admin.Options{Limits: map[string]engine.HandlerLimit{"Projector": {By: "tenant", Concurrency: 1}},
		Declared: map[string][]string{"order": {"Projector"}}})
	var throttled admin.Partition
	testkit.WaitFor(t, 10*time.Second, "a partition listed as throttled", func() bool {
		ps, err := adm.ListPartitions(ctx, admin.Filter{States: []admin.State{admin.StateThrottled}})
		if err != nil || len(ps) != 1 {
			return false
		}
		throttled = ps[0]
		return true
	})
	if throttled.LimitValue != "acme" || throttled.Owner == "" {
		t.Fatalf("throttled partition = %+v", throttled)
	}
	b, _ := json.Marshal(throttled)
	if !strings.Contains(string(b), `"state":"throttled"`) || !strings.Contains(string(b), `"limit_value":"acme"`) {
		t.Errorf("JSON of a throttled partition: %s", b)
	}
	in, err := adm.Inspect(ctx, throttled.Stream, "Projector")
	if err != nil || len(in.Handlers) != 1 || in.Handlers[0].State != admin.StateThrottled || in.Handlers[0].LimitValue != "acme" {
		t.Fatalf("inspect = %+v, %v", in, err)
	}
	ls, err := adm.Limits(ctx, admin.LimitQuery{Waiting: true})
	if err != nil || len(ls) != 1 || ls[0].Value != "acme" || ls[0].Waiting != 1 || ls[0].Use.Held != 1 || ls[0].Override != nil ||
		!cmp.Equal(ls[0].Effective, caps(1, "")) {
		t.Fatalf("limits --waiting = %+v, %v", ls, err)
	}
	if ls, err := adm.Limits(ctx, admin.LimitQuery{}); err != nil || len(ls) != 0 {
		t.Errorf("without --waiting only overrides list: %+v, %v", ls, err)
	}
	w.release()
	testkit.WaitFor(t, 10*time.Second, "both partitions handled", func() bool {
		return len(logOf(t, rdb, "A"))+len(logOf(t, rdb, "B")) == 2
	})
}

// limitedWorld is an engine whose Projector runs one event of a tenant at a time, every
// run held until release, with order:A and order:B of the tenant acme published: one
// runs, the other waits for a permit.
type limitedWorld struct {
	release func()
}

// startLimited starts the engine on worker and publishes through pub.
func startLimited(t *testing.T, worker, pub redis.UniversalClient) *limitedWorld {
	t.Helper()
	ctx := context.Background()
	gate := make(chan struct{})
	var once sync.Once
	w := &limitedWorld{release: func() { once.Do(func() { close(gate) }) }}
	d := engine.NewDomain("test").
		AddEvent(engine.EventType{Name: "OrderPlaced", Category: "order", Fields: []string{"client_id", "tenant"}}).
		AddHandler(engine.Handler{Name: "Projector", Kind: engine.EventHandlerKind, PartOf: "order", Handles: []string{"OrderPlaced"},
			SequentialBy: "client_id", Limit: engine.HandlerLimit{By: "tenant", Concurrency: 1},
			Func: func(ctx context.Context, ev engine.Event) error {
				select {
				case <-gate:
				case <-ctx.Done():
				}
				var p struct {
					Client string `json:"client_id"`
				}
				_ = json.Unmarshal(ev.Data, &p)
				return pub.RPush(context.Background(), "t:log:"+p.Client, 1).Err()
			}})
	if err := d.Init(engine.NewRedisBroker(nil)); err != nil {
		t.Fatal(err)
	}
	enginetest.Start(t, engine.EngineConfig{Domain: d, Client: worker, InstanceID: "i1"})
	t.Cleanup(w.release) // before the engine's shutdown, which waits for the handler
	broker := engine.NewRedisBroker(pub)
	for _, k := range []string{"A", "B"} {
		if _, err := broker.Publish(ctx, d, "OrderPlaced", []byte(`{"client_id":"`+k+`","tenant":"acme"}`), engine.PublishOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// The ACL users of docs/security.md can do what the limit keys need: the worker takes,
// renews and gives back permits and announces them, the read-only operator lists the
// values and their use but cannot override one, the acting operator overrides and clears
// and announces the change.
func TestLimitsWithTheACLUsersOfTheSecurityDoc(t *testing.T) {
	users := securityDocUsers(t)
	srv := redistest.StartWith(t, redistest.Options{Users: []string{users["seqctl-worker"], users["seqctl-viewer"], users["seqctl-operator"]}})
	ctx := context.Background()
	client := func(user string) redis.UniversalClient {
		opt, err := redis.ParseURL(srv.UserURL(user, passwordOf(users[user])))
		if err != nil {
			t.Fatal(err)
		}
		rdb := redis.NewClient(opt)
		t.Cleanup(func() { _ = rdb.Close() })
		return rdb
	}
	opts := admin.Options{Limits: map[string]engine.HandlerLimit{"Projector": {By: "tenant", Concurrency: 1}},
		Declared: map[string][]string{"order": {"Projector"}}}
	viewer, operator := admin.New(client("seqctl-viewer"), opts), admin.New(client("seqctl-operator"), opts)
	w := startLimited(t, client("seqctl-worker"), srv.Client(t))

	testkit.WaitFor(t, 10*time.Second, "a value with a partition waiting, as the viewer lists it", func() bool {
		ls, err := viewer.Limits(ctx, admin.LimitQuery{Waiting: true})
		return err == nil && len(ls) == 1 && ls[0].Waiting == 1 && ls[0].Use.Held == 1
	})
	actor := admin.Actor{User: "ops", Command: "limits set"}
	if _, err := viewer.SetLimit(ctx, admin.LimitRequest{Handler: "Projector", Value: "acme", Concurrency: 2, Reason: "r", Actor: actor}); !errors.Is(err, engine.ErrNoPermission) {
		t.Errorf("the viewer's set: %v, want a missing permission", err)
	}
	if _, err := operator.SetLimit(ctx, admin.LimitRequest{Handler: "Projector", Value: "acme", Rate: 100, Per: time.Second, Reason: "r", Actor: actor}); err != nil {
		t.Fatalf("the operator's set: %v", err)
	}
	if l, err := operator.Limit(ctx, "Projector", "acme"); err != nil || l.Use.Starts == nil {
		t.Fatalf("the operator's get: %+v, %v", l, err)
	}
	if err := client("seqctl-operator").Publish(ctx, keyspace.SingleNode.LimitChannel(), "Projector\x00acme\x00override").Err(); err != nil {
		t.Errorf("the operator cannot announce an override: %v", err)
	}
	if _, err := operator.ClearLimit(ctx, admin.LimitRequest{Handler: "Projector", Value: "acme", Actor: actor}); err != nil {
		t.Fatalf("the operator's clear: %v", err)
	}
	w.release()
	testkit.WaitFor(t, 10*time.Second, "both partitions handled by the worker", func() bool {
		return len(logOf(t, srv.Client(t), "A"))+len(logOf(t, srv.Client(t), "B")) == 2
	})
}

// securityDocUsers returns the ACL SETUSER lines of docs/security.md, by user.
func securityDocUsers(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	users := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); strings.HasPrefix(l, "ACL SETUSER ") && len(f) > 2 {
			users[f[2]] = l
		}
	}
	for _, u := range []string{"seqctl-worker", "seqctl-viewer", "seqctl-operator"} {
		if users[u] == "" {
			t.Fatalf("docs/security.md has no ACL SETUSER line for %s", u)
		}
	}
	return users
}

// passwordOf is the password (">pw") of an ACL SETUSER line.
func passwordOf(line string) string {
	for _, f := range strings.Fields(line) {
		if strings.HasPrefix(f, ">") {
			return f[1:]
		}
	}
	return ""
}
