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

func TestSortPartitions(t *testing.T) {
	mixed := []admin.Partition{
		{Category: "order", Key: "b", Handler: "H", Lag: 1, HeadAgeMS: 50},
		{Category: "order", Key: "a", Handler: "H", Lag: 7, HeadAgeMS: 10},
		{Category: "billing", Key: "z", Handler: "H", Lag: 7, HeadAgeMS: 90},
	}
	// Names compare in natural order: client-2 before client-10.
	natural := []admin.Partition{
		{Category: "order", Key: "client-11", Handler: "H", Backlog: 1, DLQ: 0},
		{Category: "order", Key: "client-2", Handler: "H", Backlog: 9, DLQ: 3},
		{Category: "order", Key: "client-10", Handler: "H", Backlog: 5, DLQ: 0},
	}
	for _, tt := range []struct {
		ps   []admin.Partition
		by   admin.SortBy
		want []string
	}{
		{mixed, admin.SortName, []string{"billing:z", "order:a", "order:b"}},
		{mixed, admin.SortLag, []string{"billing:z", "order:a", "order:b"}},
		{mixed, admin.SortAge, []string{"billing:z", "order:b", "order:a"}},
		{natural, admin.SortName, []string{"order:client-2", "order:client-10", "order:client-11"}},
		{natural, admin.SortBacklog, []string{"order:client-2", "order:client-10", "order:client-11"}},
		{natural, admin.SortDLQ, []string{"order:client-2", "order:client-10", "order:client-11"}},
	} {
		// Each sort starts from the reverse of the name order, so no row is in place by chance.
		ps := slices.Clone(tt.ps)
		admin.SortPartitions(ps, admin.SortName)
		slices.Reverse(ps)
		admin.SortPartitions(ps, tt.by)
		var got []string
		for _, p := range ps {
			got = append(got, p.Category+":"+p.Key)
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("sort by %s (-want +got):\n%s", tt.by, diff)
		}
	}
}

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
		`"head_id":null,"head_age_ms":null,"halted_entry_id":null,"halt":null,"pause":null,"limit_value":null,"handled":0}`
	if string(b) != want {
		t.Errorf("unowned partition:\n got %s\nwant %s", b, want)
	}
	halted := admin.Partition{Category: "order", Key: "b", Stream: "order:b", Handler: "H", Owner: "w1.1", Generation: 3,
		LeaseRemainingMS: 900, Backlog: 4, Lag: 1, Pending: 3, DLQ: 2, HeadID: "5-0", HeadAgeMS: 70, State: admin.StateHalted,
		HaltedEntryID: "5-0", Halt: &engine.HaltRecord{EntryID: "5-0", Stream: "order:b", Attempts: 3, Error: "boom"}, Handled: 8}
	throttled := admin.Partition{Category: "order", Key: "c", Stream: "order:c", Handler: "H", Owner: "w1.1", Generation: 4,
		LeaseRemainingMS: 900, Backlog: 2, Lag: 1, Pending: 1, HeadID: "6-0", HeadAgeMS: 70, State: admin.StateThrottled, LimitValue: "acme"}
	for _, p := range []admin.Partition{unowned, halted, throttled} {
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
	p := admin.Partition{Owner: "w1.1", HeadID: "1-0", HaltedEntryID: "1-0", Halt: &engine.HaltRecord{}, LimitValue: "acme"}
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
