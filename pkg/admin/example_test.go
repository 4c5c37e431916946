package admin_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/engine"
)

// List the halted partitions, worst first.
func ExampleAdmin_ListPartitions() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	adm := admin.New(rdb, admin.Options{}) // discover categories and handlers in Redis

	ps, err := adm.ListPartitions(context.Background(), admin.Filter{Halted: true})
	if err != nil {
		log.Fatal(err)
	}
	admin.SortPartitions(ps, admin.SortAge)
	for _, p := range ps {
		fmt.Printf("%s %s halted on %s: %s\n", p.Stream, p.Handler, p.HaltedEntryID, p.Halt.Error)
	}
}

// Inspect a halted head, then move exactly that entry to the DLQ.
func ExampleAdmin_Act() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	adm := admin.New(rdb, admin.Options{})
	ctx := context.Background()

	h, err := adm.Head(ctx, "order:client-123", "OrderProjector")
	if err != nil {
		log.Fatal(err)
	}
	_, err = adm.Act(ctx, admin.Action{
		Kind: admin.ActionDLQ, Stream: h.Stream, Handler: h.Handler, ExpectID: h.ID,
		Reason: "bad total, OPS-42", Actor: admin.Actor{User: "alice", Host: "ops-1", Command: "runbook"},
	})
	var moved *engine.HeadMovedError
	switch {
	case errors.As(err, &moved):
		fmt.Println("the head moved to", moved.Head, "- nothing was changed; look again")
	case err != nil:
		log.Fatal(err)
	}
}

// Retire a handler removed from the domain, naming the read figure that was inspected, so
// that trim and reap stop waiting for it.
func ExampleAdmin_RemoveGroup() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	adm := admin.New(rdb, admin.Options{})
	ctx := context.Background()

	gs, err := adm.Groups(ctx, "order")
	if err != nil {
		log.Fatal(err)
	}
	for _, g := range gs {
		if g.Name != "Mailer" {
			continue
		}
		res, err := adm.RemoveGroup(ctx, admin.GroupRemoval{
			Category: g.Category, Group: g.Name, ExpectRead: &g.Read,
			Reason: "Mailer retired, OPS-7", Actor: admin.Actor{User: "alice", Host: "ops-1", Command: "runbook"},
		})
		switch {
		case errors.Is(err, engine.ErrGroupLive), errors.Is(err, engine.ErrGroupRead):
			fmt.Println("Mailer is running or has read since:", err)
		case err != nil:
			log.Fatal(err)
		default:
			fmt.Printf("gave up %d unread entries; consumer group destroyed on %d streams\n", g.Unread, res.Destroyed)
		}
	}
}

// Raise one tenant's caps while its import runs, from a config that declares the
// handler's limit key, and see what it uses.
func ExampleAdmin_SetLimit() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	adm := admin.New(rdb, admin.Options{
		// admin.FromConfig fills these in from domain.toml.
		Limits:   map[string]engine.HandlerLimit{"OrderProjector": {By: "tenant_id", Concurrency: 2}},
		Declared: map[string][]string{"order": {"OrderProjector"}},
	})
	ctx := context.Background()

	res, err := adm.SetLimit(ctx, admin.LimitRequest{
		Handler: "OrderProjector", Value: "acme", Concurrency: 8,
		Reason: "acme import, OPS-7", Actor: admin.Actor{User: "alice", Host: "ops-1", Command: "runbook"},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("caps:", admin.CapsText(res.Before), "->", admin.CapsText(res.After))
	l, err := adm.Limit(ctx, "OrderProjector", "acme")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d runs under way, %d partitions waiting for a permit\n", l.Use.Held, l.Waiting)
}
