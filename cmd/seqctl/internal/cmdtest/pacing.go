package cmdtest

import (
	"testing"
	"time"
)

// CheckPaced checks the times (ms, sorted) of the effects of a run paced at n per
// second: at most n in any second (less EffectJitterMS), and first to last at least
// minSpan.
func CheckPaced(t *testing.T, what string, ms []int64, n int, minSpan time.Duration) {
	t.Helper()
	most, span := MostInASecond(ms), time.Duration(ms[len(ms)-1]-ms[0])*time.Millisecond
	t.Logf("--rate %d/s: at most %d %s in %d ms; first to last %s", n, most, what, 1000-EffectJitterMS, span)
	if most > n {
		t.Errorf("%d %s within %d ms, want at most %d (see EffectJitterMS)", most, what, 1000-EffectJitterMS, n)
	}
	if span < minSpan {
		t.Errorf("%d %s at %d/s spanned %s, want at least %s", len(ms), what, n, span, minSpan)
	}
}

// MostInASecond is the most effects (times in ms, sorted) in any window of one second
// less EffectJitterMS.
func MostInASecond(ms []int64) int {
	most, j := 0, 0
	for i := range ms {
		for j < len(ms) && ms[j]-ms[i] < 1000-EffectJitterMS {
			j++
		}
		most = max(most, j-i)
	}
	return most
}

// EffectJitterMS is how much the latency of one paced action may vary in these tests
// (a replay script, a retry's compare-and-act and its audit record, under -race on a
// shared machine). The pacer spaces the actions' starts 1/N apart, so no second holds
// more than N starts (TestPacerNeverMoreThanNPerWindow); what a test can see is each
// action's effect, a start plus its latency. N+1 effects fit in one second only when
// latencies differ by more than this, so the end-to-end tests count the effects in every
// window of a second less this jitter: at most N there means at most N starts in a
// second, as long as latencies vary by less than it.
const EffectJitterMS = 100
