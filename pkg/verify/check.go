// Package verify checks a recorded run of a checkable workload against seqctl's
// promises: every event of every key applied, in publish order, never two runs of one key
// at once, re-runs only as documented (after a change of owner, at most the events that
// were handled and not yet acknowledged), never a stale generation after a newer one,
// never more runs of a limit key at once than its cap, and a halt only on a poison
// event.
//
// The workload gives each key a sequence of events numbered from 1; the handler side
// records every application (an Application: the key, the number, the lease generation
// and attempt from the delivery, when it started and ended, whether it failed). Check
// reads the record and the workload and returns a Report that names, for each kind of
// violation, how many were found and the first one with its key and events.
//
// Times are compared across keys only for limit caps, so the applications of one limit
// key must be recorded by one clock (one recording process, as the verifier's own
// handlers or HTTP endpoint are).
package verify

import (
	"fmt"
	"slices"
	"sort"
	"time"
)

// Application is one run of an event by a handler, as the handler side recorded it.
type Application struct {
	Key      string    `json:"key"`
	Seq      int       `json:"seq"`        // the event's number in its key's sequence, from 1
	Gen      int64     `json:"generation"` // the lease generation it ran under (the fencing token)
	Attempt  int       `json:"attempt"`    // the delivery's attempt, from 1
	Instance string    `json:"instance,omitempty"`
	Start    time.Time `json:"start"`
	End      time.Time `json:"end"`
	Failed   bool      `json:"failed,omitempty"` // the handler returned an error: the event runs again
	Limit    string    `json:"limit,omitempty"`  // the limit key it ran under, "" without one
	// Batch is the same number for the events of one handler call of a batch (a
	// BatchFunc's run, in order), 0 for an event run alone: an event whose predecessor ran
	// just before it in its call did not start out of order, whatever became of that call.
	Batch int64 `json:"batch,omitempty"`
	// PublishedAt is when the event was published (zero when unknown): the latency of its
	// first run is Start - PublishedAt.
	PublishedAt time.Time `json:"published_at,omitzero"`
}

// Workload is what was published and what the promises allow.
type Workload struct {
	// Events is, per key, how many events were published (numbered 1..n).
	Events map[string]int
	// ReRunBound is how many handled events of a key may run again after a change of
	// owner: max_unacked - 1 + batch_max (1 in the strict mode, with no batches).
	ReRunBound int
	// Caps is the cap of each limit key (concurrent runs across its keys).
	Caps map[string]int
	// Poison is, per key, the number of its poison event (one that always fails): the key
	// must halt there and apply nothing after it.
	Poison map[string]int
}

// Halt is a halted partition as the verifier found it at the end: its key and the number
// of the event at its head.
type Halt struct {
	Key string `json:"key"`
	Seq int    `json:"seq"`
}

// Kind is a kind of violation.
type Kind string

// The kinds of violation, in the order a report lists them.
const (
	Lost            Kind = "lost"             // an event published and never applied
	OutOfOrder      Kind = "out_of_order"     // an event applied before an earlier one of its key
	Overlap         Kind = "overlap"          // two runs of one key at once
	ReRun           Kind = "rerun"            // a run again beyond the documented bound
	StaleGeneration Kind = "stale_generation" // a run under an older generation after a newer one
	CapExceeded     Kind = "cap_exceeded"     // more runs of a limit key at once than its cap
	WrongHalt       Kind = "wrong_halt"       // a halt on an event that is not poison, or a poison event that did not halt its key
)

// Kinds lists every kind, in report order.
var Kinds = []Kind{Lost, OutOfOrder, Overlap, ReRun, StaleGeneration, CapExceeded, WrongHalt}

// Violation is one violation found.
type Violation struct {
	Kind   Kind   `json:"kind"`
	Key    string `json:"key"`
	Seqs   []int  `json:"seqs"` // the events involved
	Detail string `json:"detail"`
}

func (v Violation) String() string {
	return fmt.Sprintf("%s: key %s, events %v: %s", v.Kind, v.Key, v.Seqs, v.Detail)
}

// KindReport is what a report says of one kind.
type KindReport struct {
	Kind  Kind       `json:"kind"`
	Count int        `json:"count"`
	First *Violation `json:"first,omitempty"`
}

// Report is the outcome of Check.
type Report struct {
	Keys      int `json:"keys"`
	Published int `json:"published"`
	Applied   int `json:"applied"`  // events applied successfully at least once
	Runs      int `json:"runs"`     // every run recorded, failed and repeated ones included
	ReRuns    int `json:"reruns"`   // runs of an event after a successful one (within the bound)
	Failures  int `json:"failures"` // runs that failed
	// Kinds has one entry per kind of violation, in the order of Kinds.
	Kinds []KindReport `json:"violations"`
	// Throughput is the events applied per second from the first start to the last end.
	Throughput float64 `json:"throughput_eps"`
	// Latency percentiles of first runs (Start - PublishedAt), when known.
	P50, P99, Max time.Duration `json:"-"`
	P50ms         float64       `json:"p50_ms"`
	P99ms         float64       `json:"p99_ms"`
	MaxMs         float64       `json:"max_ms"`
}

// OK reports whether no violation was found.
func (r Report) OK() bool {
	for _, k := range r.Kinds {
		if k.Count > 0 {
			return false
		}
	}
	return true
}

// Violations returns the count of kind k.
func (r Report) Violations(k Kind) int {
	for _, kr := range r.Kinds {
		if kr.Kind == k {
			return kr.Count
		}
	}
	return 0
}

// First returns the first violation of kind k, nil when none.
func (r Report) First(k Kind) *Violation {
	for _, kr := range r.Kinds {
		if kr.Kind == k {
			return kr.First
		}
	}
	return nil
}

// checker accumulates violations and the report's figures.
type checker struct {
	counts    map[Kind]int
	first     map[Kind]*Violation
	r         Report
	latencies []time.Duration // of first runs
	from, to  time.Time       // the first start and the last end
}

func (c *checker) add(k Kind, key string, seqs []int, format string, args ...any) {
	c.counts[k]++
	if c.first[k] == nil {
		c.first[k] = &Violation{Kind: k, Key: key, Seqs: seqs, Detail: fmt.Sprintf(format, args...)}
	}
}

// Check checks the applications recorded against the workload and the halts found at
// the end.
func Check(w Workload, apps []Application, halts []Halt) Report {
	c := &checker{counts: map[Kind]int{}, first: map[Kind]*Violation{}, r: Report{Keys: len(w.Events), Runs: len(apps)}}
	byKey := map[string][]Application{}
	for _, a := range apps {
		byKey[a.Key] = append(byKey[a.Key], a)
	}
	keys := make([]string, 0, len(w.Events))
	for k := range w.Events {
		keys = append(keys, k)
	}
	for k := range byKey {
		if _, ok := w.Events[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, key := range keys {
		k := &keyCheck{c: c, key: key, n: w.Events[key], bound: max(w.ReRunBound, 1), applied: map[int]int64{}, next: 1}
		k.check(byKey[key])
		k.lost(w.Poison)
	}
	c.checkHalts(w.Poison, halts)
	checkCaps(c, w.Caps, apps)
	return c.report()
}

// keyCheck checks the runs of one key, in start order.
type keyCheck struct {
	c       *checker
	key     string
	n       int           // events published
	bound   int           // re-runs allowed after a change of owner
	applied map[int]int64 // event -> generation of its last successful run
	next    int           // the first event not applied yet: 1..next-1 were
	hi      int           // the highest event applied
	maxGen  int64
	busy    Application // the run that ends last so far
}

func (k *keyCheck) check(runs []Application) {
	k.c.r.Published += k.n
	// In start order; a run that started at the same instant as another is an overlap
	// either way.
	sort.SliceStable(runs, func(i, j int) bool { return runs[i].Start.Before(runs[j].Start) })
	for i, a := range runs {
		// A run whose predecessor ran just before it in the same handler call (a batch).
		inBatch := a.Batch != 0 && i > 0 && runs[i-1].Batch == a.Batch && runs[i-1].Seq == a.Seq-1
		k.run(i == 0, a, inBatch)
	}
	k.c.r.Applied += len(k.applied)
}

// run checks one run; first says it is the key's first.
func (k *keyCheck) run(first bool, a Application, inBatch bool) {
	c, key := k.c, k.key
	if c.from.IsZero() || a.Start.Before(c.from) {
		c.from = a.Start
	}
	if a.End.After(c.to) {
		c.to = a.End
	}
	if a.Failed {
		c.r.Failures++
	}
	if !first && a.Start.Before(k.busy.End) {
		c.add(Overlap, key, []int{k.busy.Seq, a.Seq}, "event %d started at %s, while event %d ran (%s to %s)",
			a.Seq, a.Start.Format(time.RFC3339Nano), k.busy.Seq, k.busy.Start.Format(time.RFC3339Nano), k.busy.End.Format(time.RFC3339Nano))
	}
	if first || a.End.After(k.busy.End) {
		k.busy = a
	}
	if a.Gen < k.maxGen {
		c.add(StaleGeneration, key, []int{a.Seq}, "event %d ran under generation %d after a run under generation %d", a.Seq, a.Gen, k.maxGen)
	}
	k.maxGen = max(k.maxGen, a.Gen)
	prev, done := k.applied[a.Seq]
	switch {
	case a.Seq < 1 || a.Seq > k.n:
		c.add(OutOfOrder, key, []int{a.Seq}, "event %d was never published (the key has events 1 to %d)", a.Seq, k.n)
		return
	case done: // it ran again after a successful run
		switch {
		case a.Gen == prev:
			c.add(ReRun, key, []int{a.Seq}, "event %d ran again under the same generation %d, after a successful run", a.Seq, a.Gen)
		case k.hi-a.Seq >= k.bound:
			c.add(ReRun, key, []int{a.Seq, k.hi}, "event %d ran again (generation %d, attempt %d) after event %d had been applied: at most the last %d may run again after a change of owner",
				a.Seq, a.Gen, a.Attempt, k.hi, k.bound)
		default:
			c.r.ReRuns++
		}
	case a.Seq > k.next && !inBatch:
		c.add(OutOfOrder, key, []int{k.next, a.Seq}, "event %d ran before event %d had been applied", a.Seq, k.next)
	}
	if a.Failed {
		return
	}
	if !done && !a.PublishedAt.IsZero() {
		c.latencies = append(c.latencies, a.Start.Sub(a.PublishedAt))
	}
	k.applied[a.Seq] = a.Gen
	k.hi = max(k.hi, a.Seq)
	for _, ok := k.applied[k.next]; ok; _, ok = k.applied[k.next] {
		k.next++
	}
}

// lost counts the key's events never applied, but for its poison event and those after
// it, which wait on the halt.
func (k *keyCheck) lost(poison map[string]int) {
	held := k.n
	if p, ok := poison[k.key]; ok && p >= 1 && p <= k.n {
		held = p - 1
	}
	lost, firstLost := 0, 0
	for s := held; s >= 1; s-- {
		if _, ok := k.applied[s]; !ok {
			lost, firstLost = lost+1, s
		}
	}
	if lost > 0 {
		k.c.add(Lost, k.key, []int{firstLost}, "event %d was never applied (%d of the key's %d events to apply were not)", firstLost, lost, held)
		k.c.counts[Lost] += lost - 1
	}
}

// checkHalts checks each halt is on its key's poison event, and every poison event's key
// halted.
func (c *checker) checkHalts(poison map[string]int, halts []Halt) {
	halted := map[string]int{}
	for _, h := range halts {
		halted[h.Key] = h.Seq
		if p, ok := poison[h.Key]; !ok || p != h.Seq {
			c.add(WrongHalt, h.Key, []int{h.Seq}, "the key halted on event %d, which is not its poison event", h.Seq)
		}
	}
	poisoned := make([]string, 0, len(poison))
	for k := range poison {
		poisoned = append(poisoned, k)
	}
	sort.Strings(poisoned)
	for _, k := range poisoned {
		if _, ok := halted[k]; !ok {
			c.add(WrongHalt, k, []int{poison[k]}, "the key did not halt on its poison event %d", poison[k])
		}
	}
}

// report returns the report: the kinds in order, throughput and latency percentiles.
func (c *checker) report() Report {
	r := c.r
	for _, k := range Kinds {
		r.Kinds = append(r.Kinds, KindReport{Kind: k, Count: c.counts[k], First: c.first[k]})
	}
	if c.to.After(c.from) {
		r.Throughput = float64(r.Applied) / c.to.Sub(c.from).Seconds()
	}
	if l := c.latencies; len(l) > 0 {
		slices.Sort(l)
		pct := func(p float64) time.Duration { return l[min(int(p*float64(len(l))), len(l)-1)] }
		r.P50, r.P99, r.Max = pct(0.50), pct(0.99), l[len(l)-1]
		r.P50ms, r.P99ms, r.MaxMs = ms(r.P50), ms(r.P99), ms(r.Max)
	}
	return r
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// checkCaps sweeps the runs of each limit key in time order and counts those running at
// once: more than the cap is a violation (an end at the same instant as a start comes
// first).
func checkCaps(c *checker, caps map[string]int, apps []Application) {
	type edge struct {
		at    time.Time
		start bool
		a     *Application
	}
	byLimit := map[string][]edge{}
	for i := range apps {
		a := &apps[i]
		if a.Limit == "" {
			continue
		}
		if _, ok := caps[a.Limit]; !ok {
			continue
		}
		byLimit[a.Limit] = append(byLimit[a.Limit], edge{a.Start, true, a}, edge{a.End, false, a})
	}
	limits := make([]string, 0, len(byLimit))
	for l := range byLimit {
		limits = append(limits, l)
	}
	sort.Strings(limits)
	for _, l := range limits {
		edges := byLimit[l]
		sort.SliceStable(edges, func(i, j int) bool {
			if !edges[i].at.Equal(edges[j].at) {
				return edges[i].at.Before(edges[j].at)
			}
			return !edges[i].start && edges[j].start
		})
		running := map[*Application]bool{}
		for _, e := range edges {
			if !e.start {
				delete(running, e.a)
				continue
			}
			running[e.a] = true
			if len(running) > caps[l] {
				var seqs []int
				var who []string
				for a := range running {
					seqs = append(seqs, a.Seq)
					who = append(who, fmt.Sprintf("%s/%d", a.Key, a.Seq))
				}
				sort.Strings(who)
				sort.Ints(seqs)
				c.add(CapExceeded, e.a.Key, seqs, "limit %s (cap %d) had %d runs at once at %s: %v", l, caps[l], len(running), e.at.Format(time.RFC3339Nano), who)
			}
		}
	}
}
