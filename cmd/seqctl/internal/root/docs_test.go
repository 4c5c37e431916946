package root

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
)

// TestDocumentedCommandsExist reads every seqctl command line in the fenced code blocks of
// README.md and docs/*.md and checks that its command path exists and that every flag it
// uses is a flag of that command (local or inherited).
func TestDocumentedCommandsExist(t *testing.T) {
	files, _ := filepath.Glob("../../../../docs/*.md")
	files = append(files, "../../../../README.md")
	ios, _, _, _ := cmdutil.NewTestIOStreams()
	root := newCmdRoot(&cmdutil.Factory{IOStreams: ios})
	checked := 0
	for _, file := range files {
		f, err := os.Open(file)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		inFence, lineNo := false, 0
		for sc.Scan() {
			lineNo++
			line := strings.TrimSpace(sc.Text())
			if strings.HasPrefix(line, "```") {
				inFence = !inFence
				continue
			}
			if !inFence {
				continue
			}
			line = strings.TrimPrefix(line, "$ ")
			for _, prefix := range []string{"go run ./cmd/seqctl ", "seqctl "} {
				if !strings.HasPrefix(line, prefix) {
					continue
				}
				if i := strings.Index(line, " #"); i >= 0 {
					line = line[:i]
				}
				args := shellWords(strings.TrimPrefix(line, prefix))
				cmd, rest, err := root.Find(args)
				where := filepath.Base(file) + ":" + strconv.Itoa(lineNo)
				if err != nil || cmd == root {
					t.Errorf("%s: %q: no such command", where, line)
					break
				}
				for _, a := range rest {
					if !strings.HasPrefix(a, "-") || a == "-" {
						continue
					}
					name := strings.TrimLeft(strings.SplitN(a, "=", 2)[0], "-")
					var ok bool
					if strings.HasPrefix(a, "--") {
						ok = cmd.Flags().Lookup(name) != nil || cmd.InheritedFlags().Lookup(name) != nil
					} else {
						ok = cmd.Flags().ShorthandLookup(name) != nil || cmd.InheritedFlags().ShorthandLookup(name) != nil
					}
					if !ok {
						t.Errorf("%s: %q: %s has no flag %s", where, line, cmd.CommandPath(), a)
					}
				}
				checked++
				break
			}
		}
		f.Close()
	}
	if checked < 15 {
		t.Fatalf("only %d documented command lines found", checked)
	}
	t.Logf("%d documented command lines checked", checked)
}

// shellWords splits a command line on spaces, keeping single- and double-quoted parts.
func shellWords(s string) []string {
	var out []string
	var cur strings.Builder
	quote := byte(0)
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
			cur.WriteByte(c)
		case c == '\'' || c == '"':
			quote, inWord = c, true
		case c == ' ' || c == '\t':
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		case c == '\\':
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out
}
