package outbox_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/seqctl/seqctl/pkg/engine"
	"github.com/seqctl/seqctl/pkg/outbox"
)

// Enqueue writes the outbox row in the caller's transaction; a bad partition key fails the
// caller's operation and writes nothing.
func ExampleOutbox_Enqueue() {
	dom := engine.NewDomain("shop").
		AddEvent(engine.EventType{Name: "OrderPlaced", Category: "order", Fields: []string{"order_id", "client_id"}}).
		AddHandler(engine.Handler{Name: "Projector", Kind: engine.EventHandlerKind, PartOf: "order",
			Handles: []string{"OrderPlaced"}, SequentialBy: "client_id"})
	if err := dom.Init(engine.NewRedisBroker(nil)); err != nil {
		panic(err)
	}
	db, dialect, err := outbox.Open("sqlite::memory:")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	ob, err := outbox.New(db, dialect, dom)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	if err := ob.Migrate(ctx); err != nil {
		panic(err)
	}

	place := func(payload string) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() // a no-op after Commit
		// ... the application's own writes ...
		if _, err := ob.Enqueue(ctx, tx, outbox.Event{Type: "OrderPlaced", Data: []byte(payload)}); err != nil {
			return err
		}
		return tx.Commit()
	}
	fmt.Println(place(`{"order_id":"o-1","client_id":"client-123"}`))
	err = place(`{"order_id":"o-2","client_id":"a:b"}`)
	var bad *engine.InvalidKeyError
	fmt.Println(errors.As(err, &bad), bad.Rule)

	rep, err := ob.Status(ctx, outbox.StatusOptions{})
	if err != nil {
		panic(err)
	}
	fmt.Printf("pending=%d\n", rep.Counts.Pending)
	// Output:
	// <nil>
	// true contains_colon
	// pending=1
}
