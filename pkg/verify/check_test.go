package verify

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// run builds the applications of a log written as the handler side would record it.
type run struct {
	key      string
	seq      int
	gen      int64
	from, to int // milliseconds after t0
	failed   bool
	limit    string
}

var t0 = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

func apps(runs ...run) []Application {
	out := make([]Application, 0, len(runs))
	for _, r := range runs {
		out = append(out, Application{
			Key: r.key, Seq: r.seq, Gen: r.gen, Attempt: 1,
			Start: t0.Add(time.Duration(r.from) * time.Millisecond), End: t0.Add(time.Duration(r.to) * time.Millisecond),
			Failed: r.failed, Limit: r.limit, PublishedAt: t0,
		})
	}
	return out
}

// A correct run, with what the promises allow: a failure retried, a re-run of the event
// in flight after a change of owner, a poison event halting its key, two keys of a limit
// key of cap 1 one after the other.
func TestCheckFindsNothingOnACorrectRun(t *testing.T) {
	w := Workload{
		Events:     map[string]int{"a": 3, "b": 2, "p": 3},
		ReRunBound: 1,
		Caps:       map[string]int{"tenant": 1},
		Poison:     map[string]int{"p": 2},
	}
	log := apps(
		run{key: "a", seq: 1, gen: 10, from: 0, to: 5, limit: "tenant"},
		run{key: "a", seq: 2, gen: 10, from: 6, to: 8, failed: true, limit: "tenant"}, // retried
		run{key: "a", seq: 2, gen: 10, from: 9, to: 10, limit: "tenant"},              // handled, then the owner crashed before the ack
		run{key: "a", seq: 2, gen: 20, from: 30, to: 31, limit: "tenant"},             // the new owner runs it again
		run{key: "a", seq: 3, gen: 20, from: 32, to: 33, limit: "tenant"},
		run{key: "b", seq: 1, gen: 11, from: 5, to: 6, limit: "tenant"}, // starts as a's run ends
		run{key: "b", seq: 2, gen: 11, from: 11, to: 12, limit: "tenant"},
		run{key: "p", seq: 1, gen: 12, from: 0, to: 1},
		run{key: "p", seq: 2, gen: 12, from: 2, to: 3, failed: true},
		run{key: "p", seq: 2, gen: 12, from: 4, to: 5, failed: true},
	)
	// A batch of events 1 to 3 of key q fails on its poison event 3 (the whole call fails:
	// none counts as applied); 1 and 2 are then run alone, and 3 halts the key.
	w.Events["q"], w.Poison["q"] = 3, 3
	batch := apps(run{key: "q", seq: 1, gen: 13, from: 0, to: 1, failed: true}, run{key: "q", seq: 2, gen: 13, from: 1, to: 2, failed: true},
		run{key: "q", seq: 3, gen: 13, from: 2, to: 3, failed: true})
	for i := range batch {
		batch[i].Batch = 7
	}
	log = append(log, batch...)
	log = append(log, apps(run{key: "q", seq: 1, gen: 13, from: 4, to: 5}, run{key: "q", seq: 2, gen: 13, from: 6, to: 7},
		run{key: "q", seq: 3, gen: 13, from: 8, to: 9, failed: true})...)
	r := Check(w, log, []Halt{{Key: "p", Seq: 2}, {Key: "q", Seq: 3}})
	if !r.OK() {
		for _, k := range r.Kinds {
			if k.First != nil {
				t.Errorf("%d %s; first: %s", k.Count, k.Kind, k.First)
			}
		}
	}
	if r.Applied != 8 || r.ReRuns != 1 || r.Failures != 7 || r.Published != 11 || r.Runs != 16 {
		t.Errorf("applied %d, reruns %d, failures %d, published %d, runs %d; want 8, 1, 7, 11, 16", r.Applied, r.ReRuns, r.Failures, r.Published, r.Runs)
	}
	if r.Throughput <= 0 || r.P50 <= 0 || r.Max != 32*time.Millisecond {
		t.Errorf("throughput %v, p50 %v, max %v", r.Throughput, r.P50, r.Max)
	}
}

// Each kind of violation, planted alone, is found, counted and named with its key and
// events.
func TestCheckFindsEachPlantedViolation(t *testing.T) {
	base := Workload{Events: map[string]int{"a": 3}, ReRunBound: 1}
	ok := []run{{key: "a", seq: 1, gen: 10, from: 0, to: 1}, {key: "a", seq: 2, gen: 10, from: 2, to: 3}, {key: "a", seq: 3, gen: 10, from: 4, to: 5}}
	for _, tc := range []struct {
		name  string
		w     Workload
		runs  []run
		halts []Halt
		kind  Kind // the kind planted
		count int
		seqs  []int
		says  string
		also  map[Kind]int // other kinds the same fault is also (rightly) counted as
	}{
		{name: "a skipped event", w: base, runs: []run{ok[0], ok[2]},
			kind: OutOfOrder, count: 1, seqs: []int{2, 3}, says: "event 3 ran before event 2", also: map[Kind]int{Lost: 1}},
		{name: "applied out of order", w: base, runs: []run{ok[0], {key: "a", seq: 3, gen: 10, from: 2, to: 3}, {key: "a", seq: 2, gen: 10, from: 4, to: 5}},
			kind: OutOfOrder, count: 1, seqs: []int{2, 3}},
		{name: "lost at the end", w: base, runs: ok[:1],
			kind: Lost, count: 2, seqs: []int{2}, says: "event 2 was never applied (2 of the key's 3"},
		{name: "two runs of one key at once", w: base, runs: []run{ok[0], {key: "a", seq: 2, gen: 10, from: 2, to: 10}, {key: "a", seq: 3, gen: 10, from: 5, to: 6}},
			kind: Overlap, count: 1, seqs: []int{2, 3}},
		{name: "a re-run by the same owner", w: base, runs: []run{ok[0], ok[1], {key: "a", seq: 2, gen: 10, from: 3, to: 4}, ok[2]},
			kind: ReRun, count: 1, seqs: []int{2}, says: "same generation"},
		{name: "a re-run beyond the bound", w: base, runs: []run{ok[0], ok[1], ok[2], {key: "a", seq: 1, gen: 20, from: 9, to: 10}},
			kind: ReRun, count: 1, seqs: []int{1, 3}, says: "at most the last 1"},
		{name: "a stale generation after a newer one", w: base, runs: []run{ok[0], {key: "a", seq: 2, gen: 20, from: 2, to: 3}, {key: "a", seq: 3, gen: 10, from: 4, to: 5}},
			kind: StaleGeneration, count: 1, seqs: []int{3}},
		{name: "a cap exceeded",
			w:    Workload{Events: map[string]int{"a": 1, "b": 1}, Caps: map[string]int{"tenant": 1}},
			runs: []run{{key: "a", seq: 1, gen: 1, from: 0, to: 5, limit: "tenant"}, {key: "b", seq: 1, gen: 2, from: 4, to: 6, limit: "tenant"}},
			kind: CapExceeded, count: 1, says: "[a/1 b/1]"},
		{name: "a halt on the wrong event", w: base, runs: ok[:1], halts: []Halt{{Key: "a", Seq: 2}},
			kind: WrongHalt, count: 1, seqs: []int{2}, says: "not its poison event", also: map[Kind]int{Lost: 2}},
		{name: "a poison event that did not halt",
			w:    Workload{Events: map[string]int{"a": 3}, ReRunBound: 1, Poison: map[string]int{"a": 2}},
			runs: ok[:1], kind: WrongHalt, count: 1, seqs: []int{2}, says: "did not halt"},
		{name: "an event applied after its key's poison event",
			w:     Workload{Events: map[string]int{"a": 3}, ReRunBound: 1, Poison: map[string]int{"a": 2}},
			runs:  []run{ok[0], {key: "a", seq: 2, gen: 10, from: 2, to: 3, failed: true}, ok[2]},
			halts: []Halt{{Key: "a", Seq: 2}},
			kind:  OutOfOrder, count: 1, seqs: []int{2, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Check(tc.w, apps(tc.runs...), tc.halts)
			if r.OK() {
				t.Fatalf("no violation found")
			}
			for _, k := range r.Kinds {
				want := tc.also[k.Kind]
				if k.Kind == tc.kind {
					want = tc.count
				}
				if k.Count != want {
					t.Errorf("%d %s, want %d (first: %v)", k.Count, k.Kind, want, k.First)
				}
			}
			v := r.First(tc.kind)
			if v == nil {
				t.Fatalf("no first %s", tc.kind)
			}
			if v.Key == "" || (tc.seqs != nil && !equal(v.Seqs, tc.seqs)) || !strings.Contains(v.Detail, tc.says) {
				t.Errorf("first %s: %s; want key named, events %v, detail with %q", tc.kind, v, tc.seqs, tc.says)
			}
		})
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// The report's JSON names every kind, with its count and its first violation.
func TestReportJSON(t *testing.T) {
	r := Check(Workload{Events: map[string]int{"a": 2}, ReRunBound: 1}, apps(run{key: "a", seq: 2, gen: 1, from: 0, to: 1}), nil)
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"kind":"lost","count":1`, `"kind":"out_of_order","count":1,"first":{"kind":"out_of_order","key":"a","seqs":[1,2]`, `"kind":"cap_exceeded","count":0}`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("JSON lacks %s:\n%s", want, b)
		}
	}
}
