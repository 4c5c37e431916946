package engine

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// regBroker is a BrokerInfo with a chosen kind and capabilities.
type regBroker struct {
	kind string
	caps []Capability
}

func (b regBroker) Kind() string { return b.kind }

func (b regBroker) Has(c Capability) bool {
	for _, x := range b.caps {
		if x == c {
			return true
		}
	}
	return false
}

var (
	regRedis  = regBroker{kind: BrokerKindRedis, caps: []Capability{StreamPartitioning}}
	regInline = regBroker{kind: BrokerKindInline}
	regKafka  = regBroker{kind: "kafka"} // neither partitioning nor inline
)

// shop returns a domain with declarations only:
//
//	order:         OrderPlaced (order_id, client_id, total), OrderShipped (order_id, client_id)
//	payment:       PaymentConfirmed (payment_id, order_ref, amount)
//	shipping:      ShipmentDispatched (shipment_id, order_id)
//	order_command: PlaceOrder (order_id, client_id)   [command]
func regShop() *Domain {
	return NewDomain("shop").
		AddEvent(EventType{Name: "OrderPlaced", Category: "order", Fields: []string{"order_id", "client_id", "total"}}).
		AddEvent(EventType{Name: "OrderShipped", Category: "order", Fields: []string{"order_id", "client_id"}}).
		AddEvent(EventType{Name: "PaymentConfirmed", Category: "payment", Fields: []string{"payment_id", "order_ref", "amount"}}).
		AddEvent(EventType{Name: "ShipmentDispatched", Category: "shipping", Fields: []string{"shipment_id", "order_id"}}).
		AddCommand(CommandType{Name: "PlaceOrder", Category: "order_command", Fields: []string{"order_id", "client_id"}})
}

func regProjector(name, field string, handles ...string) Handler {
	if len(handles) == 0 {
		handles = []string{"OrderPlaced", "OrderShipped"}
	}
	return Handler{Name: name, Kind: EventHandlerKind, PartOf: "order", Handles: handles, SequentialBy: field}
}

func regFulfillment(sequential bool, handles ...PMHandle) ProcessManager {
	return ProcessManager{Name: "Fulfillment", SequentialBy: sequential, Handles: handles}
}

func TestInitRegistration(t *testing.T) {
	tests := []struct {
		name   string
		build  func(d *Domain)
		broker BrokerInfo
		// wantProblems lists, per expected problem in order, fragments its text contains.
		wantProblems [][]string
		// wantKeys is PartitionKeys() after a successful Init.
		wantKeys map[string]string
	}{
		{
			name:     "event handler with an existing field",
			build:    func(d *Domain) { d.AddHandler(regProjector("P", "client_id")) },
			broker:   regRedis,
			wantKeys: map[string]string{"order": "client_id"},
		},
		{
			name:   "event handler: sequential_by field missing from a handled event",
			build:  func(d *Domain) { d.AddHandler(regProjector("P", "total")) },
			broker: regRedis,
			wantProblems: [][]string{
				{`handler "P"`, `sequential_by field "total" is missing from event "OrderShipped"`, "fields: order_id, client_id"},
			},
		},
		{
			name: "command handler: sequential_by field missing from the command",
			build: func(d *Domain) {
				d.AddHandler(Handler{Name: "Placer", Kind: CommandHandlerKind, PartOf: "order_command", Handles: []string{"PlaceOrder"}, SequentialBy: "tenant"})
			},
			broker: regRedis,
			wantProblems: [][]string{
				{`handler "Placer"`, `sequential_by field "tenant" is missing from command "PlaceOrder"`},
			},
		},
		{
			name: "process manager: a map correlate whose event field is missing",
			build: func(d *Domain) {
				d.AddProcessManager(regFulfillment(true,
					PMHandle{Event: "PaymentConfirmed", Correlate: Correlate{PMField: "order_id", EventField: "order_reference"}, Start: true}))
			},
			broker: regRedis,
			wantProblems: [][]string{
				{`process manager "Fulfillment"`, `event "PaymentConfirmed" lacks field "order_reference"`, "correlate"},
			},
		},
		{
			name: "process manager: a map correlate whose field exists",
			build: func(d *Domain) {
				d.AddProcessManager(regFulfillment(true,
					PMHandle{Event: "PaymentConfirmed", Correlate: Correlate{PMField: "order_id", EventField: "order_ref"}, Start: true},
					PMHandle{Event: "ShipmentDispatched", Correlate: Correlate{PMField: "order_id", EventField: "order_id"}}))
			},
			broker:   regRedis,
			wantKeys: map[string]string{"payment": "order_ref", "shipping": "order_id"},
		},
		{
			name: "conflicting keys on one category",
			build: func(d *Domain) {
				d.AddHandler(regProjector("Projector", "client_id"))
				d.AddHandler(regProjector("Audit", "order_id", "OrderPlaced"))
			},
			broker: regRedis,
			wantProblems: [][]string{
				{"conflicting", `category "order"`, `handler "Projector"`, `"client_id"`, `handler "Audit"`, `"order_id"`},
			},
		},
		{
			name: "the same key twice is accepted",
			build: func(d *Domain) {
				d.AddHandler(regProjector("Projector", "client_id"))
				d.AddHandler(regProjector("Audit", "client_id", "OrderPlaced"))
			},
			broker:   regRedis,
			wantKeys: map[string]string{"order": "client_id"},
		},
		{
			name: "a handler without sequential_by does not vote",
			build: func(d *Domain) {
				d.AddHandler(regProjector("Projector", "client_id"))
				d.AddHandler(regProjector("Mailer", ""))
			},
			broker:   regRedis,
			wantKeys: map[string]string{"order": "client_id"},
		},
		{
			name: "a process manager's correlation field is a declaration on its categories",
			build: func(d *Domain) {
				d.AddHandler(Handler{Name: "Ledger", PartOf: "payment", Handles: []string{"PaymentConfirmed"}, SequentialBy: "payment_id"})
				d.AddProcessManager(regFulfillment(true,
					PMHandle{Event: "PaymentConfirmed", Correlate: Correlate{PMField: "order_id", EventField: "order_ref"}, Start: true}))
			},
			broker: regRedis,
			wantProblems: [][]string{
				{"conflicting", `category "payment"`, `handler "Ledger"`, `"payment_id"`, `process manager "Fulfillment"`, `"order_ref"`},
			},
		},
		{
			name: "a process manager agreeing with a handler",
			build: func(d *Domain) {
				d.AddHandler(Handler{Name: "Ledger", PartOf: "payment", Handles: []string{"PaymentConfirmed"}, SequentialBy: "order_ref"})
				d.AddProcessManager(regFulfillment(true,
					PMHandle{Event: "PaymentConfirmed", Correlate: Correlate{PMField: "order_id", EventField: "order_ref"}, Start: true}))
			},
			broker:   regRedis,
			wantKeys: map[string]string{"payment": "order_ref"},
		},
		{
			name: "a non-sequential process manager does not declare",
			build: func(d *Domain) {
				d.AddHandler(Handler{Name: "Ledger", PartOf: "payment", Handles: []string{"PaymentConfirmed"}, SequentialBy: "payment_id"})
				d.AddProcessManager(regFulfillment(false,
					PMHandle{Event: "PaymentConfirmed", Correlate: Correlate{PMField: "order_id", EventField: "order_ref"}, Start: true}))
			},
			broker:   regRedis,
			wantKeys: map[string]string{"payment": "payment_id"},
		},
		{
			name: "a process manager correlating on two of its own fields",
			build: func(d *Domain) {
				d.AddProcessManager(regFulfillment(true,
					PMHandle{Event: "PaymentConfirmed", Correlate: Correlate{PMField: "order_id", EventField: "order_ref"}},
					PMHandle{Event: "ShipmentDispatched", Correlate: Correlate{PMField: "shipment", EventField: "shipment_id"}}))
			},
			broker:       regRedis,
			wantProblems: [][]string{{`process manager "Fulfillment" correlates on two process-manager fields`, `"order_id"`, `"shipment"`}},
		},
		{
			name:   "broker without the capability is rejected",
			build:  func(d *Domain) { d.AddHandler(regProjector("P", "client_id")) },
			broker: regKafka,
			wantProblems: [][]string{
				{`broker "kafka"`, "STREAM_PARTITIONING", `categories "order"`},
			},
		},
		{
			name: "broker without the capability names every partitioned category",
			build: func(d *Domain) {
				d.AddHandler(regProjector("P", "client_id"))
				d.AddProcessManager(regFulfillment(true,
					PMHandle{Event: "PaymentConfirmed", Correlate: Correlate{PMField: "order_id", EventField: "order_ref"}}))
			},
			broker:       regKafka,
			wantProblems: [][]string{{`broker "kafka"`, "STREAM_PARTITIONING", `"order", "payment"`}},
		},
		{
			name:     "broker without the capability is fine without sequential_by",
			build:    func(d *Domain) { d.AddHandler(regProjector("P", "")) },
			broker:   regKafka,
			wantKeys: map[string]string{},
		},
		{
			name:     "inline broker accepts sequential_by as a no-op",
			build:    func(d *Domain) { d.AddHandler(regProjector("P", "client_id")) },
			broker:   regInline,
			wantKeys: map[string]string{"order": "client_id"},
		},
		{
			name: "command handler sequential_by is accepted and checked but not partitioned",
			build: func(d *Domain) {
				d.AddHandler(Handler{Name: "Placer", Kind: CommandHandlerKind, PartOf: "order_command", Handles: []string{"PlaceOrder"}, SequentialBy: "client_id"})
			},
			broker:   regRedis,
			wantKeys: map[string]string{},
		},
		{
			name: "command handlers must agree on one key too",
			build: func(d *Domain) {
				d.AddHandler(Handler{Name: "Placer", Kind: CommandHandlerKind, PartOf: "order_command", Handles: []string{"PlaceOrder"}, SequentialBy: "client_id"})
				d.AddHandler(Handler{Name: "Auditor", Kind: CommandHandlerKind, PartOf: "order_command", Handles: []string{"PlaceOrder"}, SequentialBy: "order_id"})
			},
			broker:       regRedis,
			wantProblems: [][]string{{"conflicting", `category "order_command"`}},
		},
		{
			name: "category inferred from the first handled event",
			build: func(d *Domain) {
				d.AddHandler(Handler{Name: "P", Handles: []string{"ShipmentDispatched"}, SequentialBy: "order_id"})
			},
			broker:   regRedis,
			wantKeys: map[string]string{"shipping": "order_id"},
		},
		{
			name: "several problems are reported together",
			build: func(d *Domain) {
				d.AddHandler(regProjector("Projector", "client_id"))
				d.AddHandler(regProjector("Audit", "total"))
				d.AddHandler(Handler{Name: "Ghost", PartOf: "order", Handles: []string{"OrderRefunded"}})
				d.BackfillSuffix = "dlq"
			},
			broker: regRedis,
			wantProblems: [][]string{
				{`handler "Audit"`, `"total" is missing from event "OrderShipped"`},
				{`handler "Ghost" handles "OrderRefunded", which is not a declared event`},
				{"conflicting", `"client_id"`, `"total"`},
				{"backfill_suffix", "dlq"},
			},
		},
		{
			name: "declaration mistakes",
			build: func(d *Domain) {
				d.AddEvent(EventType{Name: "OrderPlaced", Category: "sales"})
				d.AddCommand(CommandType{Name: "Cancel", Category: "bad:category"})
				d.AddHandler(Handler{Name: "P", PartOf: "payment", Handles: []string{"OrderPlaced"}})
				d.AddHandler(Handler{Name: "P", Handles: []string{"PlaceOrder"}})
				d.AddHandler(Handler{Name: "Empty"})
				d.AddProcessManager(ProcessManager{Name: "Empty", Handles: []PMHandle{{Event: "OrderPlaced"}}})
			},
			broker: regRedis,
			wantProblems: [][]string{
				{`event "OrderPlaced" is declared twice`},
				{`command "Cancel"`, "contains ':'"},
				{`handler "P" is part of category "payment" but handles "OrderPlaced" of category "order"`},
				{`handler "P" is declared twice`},
				{`handler "P" handles "PlaceOrder", which is not a declared event`},
				{`handler "Empty" handles no event`},
				{`process manager "Empty": the name is already used`},
				{`process manager "Empty": the correlate spec for "OrderPlaced" is empty`},
			},
		},
		{
			name: "batch_max out of range",
			build: func(d *Domain) {
				h := regProjector("P", "client_id")
				h.BatchMax = MaxBatch + 1
				d.AddHandler(h)
			},
			broker:       regRedis,
			wantProblems: [][]string{{`handler "P"`, "batch_max 1001 is out of range", "up to 1000"}},
		},
		{
			name: "batch_wait without batch_max",
			build: func(d *Domain) {
				h := regProjector("P", "client_id")
				h.BatchWait = time.Millisecond
				d.AddHandler(h)
			},
			broker:       regRedis,
			wantProblems: [][]string{{`handler "P"`, "batch_wait 1ms waits to fill batches, but batch_max is 1", "set batch_max above 1"}},
		},
		{
			name: "batch_max on a Func",
			build: func(d *Domain) {
				h := regProjector("P", "client_id")
				h.BatchMax, h.Func = 8, func(context.Context, Event) error { return nil }
				d.AddHandler(h)
			},
			broker:       regRedis,
			wantProblems: [][]string{{`handler "P"`, "batch_max is 8 but the handler is a Func", "set BatchFunc instead"}},
		},
		{
			name: "both Func and BatchFunc",
			build: func(d *Domain) {
				h := regProjector("P", "client_id")
				h.Func = func(context.Context, Event) error { return nil }
				h.BatchFunc = func(context.Context, []Event) error { return nil }
				d.AddHandler(h)
			},
			broker:       regRedis,
			wantProblems: [][]string{{`handler "P"`, "both Func and BatchFunc are set"}},
		},
		{
			name: "batch_max on a command handler",
			build: func(d *Domain) {
				d.AddHandler(Handler{Name: "Placer", Kind: CommandHandlerKind, PartOf: "order_command", Handles: []string{"PlaceOrder"}, BatchMax: 4})
			},
			broker:       regRedis,
			wantProblems: [][]string{{`handler "Placer"`, "batch_max applies to event handlers"}},
		},
		{
			name: "a batch handler",
			build: func(d *Domain) {
				h := regProjector("P", "client_id")
				h.BatchMax, h.BatchWait = 32, 20*time.Millisecond
				h.BatchFunc = func(context.Context, []Event) error { return nil }
				d.AddHandler(h)
			},
			broker:   regRedis,
			wantKeys: map[string]string{"order": "client_id"},
		},
		{
			name:         "no broker",
			build:        func(d *Domain) {},
			broker:       nil,
			wantProblems: [][]string{{"no broker given to Init"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := regShop()
			tt.build(d)
			err := d.Init(tt.broker)
			if tt.wantProblems == nil {
				if err != nil {
					t.Fatalf("Init: unexpected error: %v", err)
				}
				if !d.Initialized() {
					t.Errorf("Initialized() = false after a successful Init")
				}
				if diff := cmp.Diff(tt.wantKeys, d.PartitionKeys()); diff != "" {
					t.Errorf("PartitionKeys mismatch (-want +got):\n%s", diff)
				}
				return
			}
			var iue *IncorrectUsageError
			if !errors.As(err, &iue) {
				t.Fatalf("Init error %T (%v), want *IncorrectUsageError", err, err)
			}
			if len(iue.Problems) != len(tt.wantProblems) {
				t.Fatalf("Init reported %d problems, want %d:\n%v", len(iue.Problems), len(tt.wantProblems), err)
			}
			for i, frags := range tt.wantProblems {
				for _, frag := range frags {
					if !strings.Contains(iue.Problems[i], frag) {
						t.Errorf("problem %d %q does not contain %q", i, iue.Problems[i], frag)
					}
				}
			}
			if d.Initialized() {
				t.Errorf("Initialized() = true after a failed Init")
			}
			if got := d.PartitionKeys(); len(got) != 0 {
				t.Errorf("PartitionKeys() = %v after a failed Init, want empty", got)
			}
		})
	}
}

func TestInitPartitionFieldByBroker(t *testing.T) {
	tests := []struct {
		name   string
		broker BrokerInfo
		active bool
	}{
		{"redis routes partitioned events", regRedis, true},
		{"inline keeps the key but does not route", regInline, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := regShop().AddHandler(regProjector("P", "client_id"))
			if err := d.Init(tt.broker); err != nil {
				t.Fatal(err)
			}
			field, ok := d.PartitionField("order")
			if ok != tt.active || (ok && field != "client_id") {
				t.Errorf("PartitionField(order) = %q, %v; want client_id, %v", field, ok, tt.active)
			}
			if _, ok := d.PartitionField("payment"); ok {
				t.Errorf("PartitionField(payment) active, want inactive: nobody declared a key there")
			}
			if _, ok := d.PartitionField("order_command"); ok {
				t.Errorf("PartitionField(order_command) active, want inactive: commands are never partitioned")
			}
		})
	}
}

func TestIncorrectUsageErrorMessage(t *testing.T) {
	one := &IncorrectUsageError{Problems: []string{"a"}}
	if diff := cmp.Diff("engine: incorrect usage: a", one.Error()); diff != "" {
		t.Errorf("one problem (-want +got):\n%s", diff)
	}
	two := &IncorrectUsageError{Problems: []string{"a", "b"}}
	if diff := cmp.Diff("engine: incorrect usage (2 problems):\n  - a\n  - b", two.Error()); diff != "" {
		t.Errorf("two problems (-want +got):\n%s", diff)
	}
}

func TestInitFreezesCopies(t *testing.T) {
	d := regShop().AddHandler(regProjector("P", "client_id"))
	if err := d.Init(regRedis); err != nil {
		t.Fatal(err)
	}
	keys := d.PartitionKeys()
	keys["order"] = "tampered"
	if f, _ := d.PartitionField("order"); f != "client_id" {
		t.Errorf("mutating PartitionKeys() changed the domain: PartitionField(order) = %q", f)
	}
	if e, ok := d.Event("OrderPlaced"); !ok || e.Category != "order" {
		t.Errorf("Event(OrderPlaced) = %+v, %v; want the declared event", e, ok)
	}
	if _, ok := d.Event("PlaceOrder"); ok {
		t.Errorf("Event(PlaceOrder) found a command; Event looks up events only")
	}
}

func TestValidateCategory(t *testing.T) {
	tests := []struct {
		category string
		want     string // fragment of the error, "" for valid
	}{
		{"order", ""},
		{"order_command", ""},
		{"order-v2", ""},
		{"_x_", ""},
		{"", "empty"},
		{"a:b", "contains ':'"},
		{"a b", "white space"},
		{"a\tb", "white space"},
		{"a\nb", "white space"},
		{"__x__", "__name__"},
	}
	for _, tt := range tests {
		t.Run(tt.category, func(t *testing.T) {
			err := ValidateCategory(tt.category)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("ValidateCategory(%q) = %v, want nil", tt.category, err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("ValidateCategory(%q) = %v, want an error containing %q", tt.category, err, tt.want)
			}
		})
	}
}
