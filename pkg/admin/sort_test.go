package admin_test

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/engine"
)

func TestNaturalCompare(t *testing.T) {
	keys := []string{"client-11", "client-1", "client-10", "client-2", "client-02", "a", "client-", "b1", "b01x", "9", "10", "client-1a"}
	slices.SortFunc(keys, admin.NaturalCompare)
	want := []string{"9", "10", "a", "b1", "b01x", "client-", "client-1", "client-1a", "client-2", "client-02", "client-10", "client-11"}
	if diff := cmp.Diff(want, keys); diff != "" {
		t.Errorf("natural order (-want +got):\n%s", diff)
	}
	for _, k := range keys {
		if admin.NaturalCompare(k, k) != 0 {
			t.Errorf("%q does not equal itself", k)
		}
	}
}

// The JSON form: null for absent values, the same fields back after a round trip.
func TestPartitionJSON(t *testing.T) {
	unowned := admin.Partition{Category: "order", Key: "a", Stream: "order:a", Handler: "H", Backlog: -1, Lag: -1, State: admin.StateUnowned}
	b, err := json.Marshal(unowned)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"category":"order","key":"a","stream":"order:a","handler":"H","process_manager":false,"state":"unowned",` +
		`"owner":null,"generation":null,"lease_remaining_ms":null,"backlog":null,"lag":null,"pending":0,"dlq":0,` +
		`"head_id":null,"head_age_ms":null,"halted_entry_id":null,"halt":null,"handled":0}`
	if string(b) != want {
		t.Errorf("unowned partition:\n got %s\nwant %s", b, want)
	}
	halted := admin.Partition{Category: "order", Key: "b", Stream: "order:b", Handler: "H", Owner: "w1.1", Generation: 3,
		LeaseRemainingMS: 900, Backlog: 4, Lag: 1, Pending: 3, DLQ: 2, HeadID: "5-0", HeadAgeMS: 70, State: admin.StateHalted,
		HaltedEntryID: "5-0", Halt: &engine.HaltRecord{EntryID: "5-0", Stream: "order:b", Attempts: 3, Error: "boom"}, Handled: 8}
	for _, p := range []admin.Partition{unowned, halted} {
		b, _ := json.Marshal(p)
		var back admin.Partition
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(p, back); diff != "" {
			t.Errorf("round trip (-want +got):\n%s", diff)
		}
	}
}

// Every JSON field of a partition is documented in docs/json-output.md.
func TestPartitionJSONDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/json-output.md")
	if err != nil {
		t.Fatal(err)
	}
	p := admin.Partition{Owner: "w1.1", HeadID: "1-0", HaltedEntryID: "1-0", Halt: &engine.HaltRecord{}}
	b, _ := json.Marshal(p)
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		t.Fatal(err)
	}
	hb, _ := json.Marshal(p.Halt)
	var halt map[string]json.RawMessage
	_ = json.Unmarshal(hb, &halt)
	for _, m := range []map[string]json.RawMessage{fields, halt} {
		for f := range m {
			if !strings.Contains(string(doc), "| `"+f+"` |") {
				t.Errorf("field %q is not in the tables of docs/json-output.md", f)
			}
		}
	}
}

// Absent times are null in the JSON of a head and a DLQ entry, not missing.
func TestAbsentTimesAreNull(t *testing.T) {
	for _, v := range []any{admin.Head{}, admin.DLQEntry{}} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{`"halted_since":null`, `"published_at":null`} {
			if !strings.Contains(string(b), f) {
				t.Errorf("%T JSON lacks %s: %s", v, f, b)
			}
		}
	}
	b, _ := json.Marshal(admin.DLQEntry{})
	if !strings.Contains(string(b), `"moved_at":null`) {
		t.Errorf("DLQ entry JSON lacks moved_at null: %s", b)
	}
}
