package engine

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/seqctl/seqctl/pkg/engine/scripts"
)

// docs/concepts.md says which actions on a partition check both the lease and the
// caller's session inside their script. Each action it names must be one whose script
// does both, so that the page keeps telling what the code does.
func TestConceptsNameTheScriptsThatCheckTheSession(t *testing.T) {
	doc, err := os.ReadFile("../../docs/concepts.md")
	if err != nil {
		t.Fatal(err)
	}
	const lead = "and that the caller's session exists:"
	text := strings.Join(strings.Fields(string(doc)), " ")
	i := strings.Index(text, lead)
	if i < 0 {
		t.Fatalf("concepts.md no longer says %q", lead)
	}
	list := text[i+len(lead):]
	list = list[:strings.IndexAny(list, ".(")]
	checking := map[string][]string{
		"reading":               {"drain.lua"},
		"acknowledging":         {"ack.lua", "ackmany.lua"},
		"reclaiming":            {"drain.lua"},
		"writing a halt record": {"halt.lua"},
		"trimming":              {"trim.lua"},
		"reaping":               {"reap.lua"},
		"releasing":             {"release.lua"},
		"giving entries back":   {"giveback.lua"},
	}
	// Either form: a GET of the lease and an EXISTS of the session, or both in one MGET
	// (fence[1] the lease, fence[2] the session; ackmany.lua reads the session first).
	session := regexp.MustCompile(`redis\.call\('EXISTS', KEYS\[\d\]\) == 0|` +
		`fence = redis\.call\('MGET', KEYS\[1\], KEYS\[2\]\)[\s\S]*not fence\[2\]|` +
		`names = \{KEYS\[1\]\}[\s\S]*redis\.call\('MGET'[\s\S]*if not held\[1\] then`)
	lease := regexp.MustCompile(`redis\.call\('GET', KEYS\[1\]\) ~= ARGV\[1\]|` +
		`fence = redis\.call\('MGET', KEYS\[1\], KEYS\[2\]\)\s*\nif fence\[1\] ~= ARGV\[1\]`)
	for _, action := range regexp.MustCompile(`,\s*(?:and\s+)?|\s+and\s+`).Split(strings.TrimSpace(list), -1) {
		files, ok := checking[action]
		if !ok {
			t.Errorf("concepts.md names %q among the actions that check the session: add it to this test", action)
			continue
		}
		for _, f := range files {
			src := []byte(scripts.Source(f))
			if len(src) == 0 {
				t.Fatalf("no script %s", f)
			}
			if f != "ackmany.lua" && !lease.Match(src) {
				t.Errorf("%s (%s) does not compare the lease with the caller's token", action, f)
			}
			if !session.Match(src) {
				t.Errorf("concepts.md says %s checks the caller's session, but %s does not", action, f)
			}
		}
	}
}
