package cli

import (
	"context"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// CompletionOptions are the inputs of 'seqctl completion'.
type CompletionOptions struct {
	IO    *IOStreams
	Shell string // bash, zsh or fish
	// Root is the command tree the script completes.
	Root *cobra.Command
}

func newCmdCompletion(f *Factory, runF func(*CompletionOptions) error) *cobra.Command {
	opts := &CompletionOptions{IO: f.IOStreams}
	cmd := &cobra.Command{
		Use:   "completion bash|zsh|fish",
		Short: "Print the shell completion script for bash, zsh or fish",
		Long: `Print a completion script for your shell. It completes commands and flags, and
asks seqctl for the dynamic parts: partition streams (from the discovery indexes in
Redis, or the categories of --config), handler names for --handler, categories for
--category, live instances and their sessions for --owner, and DLQ entry ids for
'dlq replay --id'. The bash script works with or without the bash-completion package. Dynamic completion uses the same --redis-url / --config /
SEQCTL_REDIS_URL as the command line being completed, and completes nothing when Redis
does not answer within a few seconds.`,
		Example: `  # bash, for the current shell
  $ source <(seqctl completion bash)

  # bash, for every shell (Linux)
  $ seqctl completion bash > /etc/bash_completion.d/seqctl

  # zsh: a file on $fpath, then start a new shell
  $ seqctl completion zsh > "${fpath[1]}/_seqctl"

  # fish
  $ seqctl completion fish > ~/.config/fish/completions/seqctl.fish`,
		ValidArgs: []string{"bash", "zsh", "fish"},
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErrorf(cmd.CommandPath(), "name one shell: bash, zsh or fish")
			}
			switch args[0] {
			case "bash", "zsh", "fish":
				return nil
			}
			return usageErrorf(cmd.CommandPath(), "unsupported shell %q: want bash, zsh or fish", args[0])
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Shell, opts.Root = args[0], cmd.Root()
			if runF != nil {
				return runF(opts)
			}
			return completionRun(opts)
		},
	}
	return cmd
}

func completionRun(opts *CompletionOptions) error {
	w := opts.IO.Out
	switch opts.Shell {
	case "bash":
		// cobra's V2 script leans on two helpers of the bash-completion package; without
		// that package 'source <(seqctl completion bash)' failed on the first TAB. The
		// preamble defines small stand-ins only where the package has not.
		if _, err := io.WriteString(w, bashShims); err != nil {
			return err
		}
		return opts.Root.GenBashCompletionV2(w, true)
	case "zsh":
		return opts.Root.GenZshCompletion(w)
	default:
		return opts.Root.GenFishCompletion(w, true)
	}
}

// bashShims stands in for _get_comp_words_by_ref and _filedir of the bash-completion
// package when it is not loaded. __seqctl_words_by_ref joins back what bash split at a
// word-break character named with -n (":" and "=": order:client-1, --handler=X), so the
// word under the cursor is whole.
const bashShims = `# Stand-ins for the bash-completion package, defined only when it is not loaded.
if ! declare -F _get_comp_words_by_ref >/dev/null 2>&1; then
_get_comp_words_by_ref()
{
    local exclude="" i t glue="" n=-1 at=0
    local -a w=()
    if [[ $1 == -n ]]; then exclude=$2; shift 2; fi
    for ((i = 0; i < ${#COMP_WORDS[@]}; i++)); do
        t=${COMP_WORDS[i]}
        local sep=""
        if [[ -n $exclude && -n $t && -z ${t//[$exclude]/} ]]; then sep=1; fi
        if ((i > 0)) && [[ -n $sep || -n $glue ]]; then
            w[n]+=$t
        else
            n=$((n + 1))
            w[n]=$t
        fi
        glue=$sep
        if ((i == COMP_CWORD)); then at=$n; fi
    done
    while (($# > 0)); do
        case $1 in
        cur) cur=${w[at]} ;;
        prev) prev=${w[at - 1]} ;;
        words) words=("${w[@]:0:at+1}") ;;
        cword) cword=$at ;;
        esac
        shift
    done
}
fi
if ! declare -F _filedir >/dev/null 2>&1; then
_filedir()
{
    local IFS=$'\n'
    if [[ $1 == -d ]]; then
        COMPREPLY=($(compgen -d -- "$cur"))
    else
        COMPREPLY=($(compgen -f -- "$cur"))
    fi
}
fi

`

// completionTimeout bounds a dynamic completion's Redis calls: a shell must not hang.
const completionTimeout = 3 * time.Second

// completeWith returns a completion function offering, of the candidates list finds
// with an admin connection (values, or values with a description: see
// cobra.CompletionWithDesc), those whose value starts with the word being completed.
// want (nil: always) says from the arguments so far whether the word is completed at
// all, before connecting. It offers nothing when Redis cannot be reached in time, and
// never file names.
func completeWith(f *Factory, want func(args []string) bool, list func(ctx context.Context, adm Admin, args []string) []cobra.Completion) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if want != nil && !want(args) {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(orBackground(cmd.Context()), completionTimeout)
		defer cancel()
		adm, closeAdm, err := f.openAdmin(ctx)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		defer closeAdm()
		var keep []cobra.Completion
		for _, c := range list(ctx, adm, args) {
			if value, _, _ := strings.Cut(c, "\t"); strings.HasPrefix(value, toComplete) {
				keep = append(keep, c)
			}
		}
		return keep, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeStreams completes the STREAM argument with the indexed partition streams.
func completeStreams(f *Factory) cobra.CompletionFunc {
	noStreamYet := func(args []string) bool { return len(args) == 0 }
	return completeWith(f, noStreamYet, func(ctx context.Context, adm Admin, _ []string) []cobra.Completion {
		streams, err := adm.Streams(ctx)
		if err != nil {
			return nil
		}
		return streams
	})
}

// completeHandlers completes --handler with the consumer groups of the STREAM's
// category, or of every category when the command has no STREAM (partitions list).
func completeHandlers(f *Factory) cobra.CompletionFunc {
	return completeWith(f, nil, func(ctx context.Context, adm Admin, args []string) []cobra.Completion {
		streams := args[:min(len(args), 1)]
		if len(streams) == 0 {
			streams = oneStreamPerCategory(ctx, adm)
		}
		seen := map[string]bool{}
		var handlers []cobra.Completion
		for _, s := range streams {
			hs, err := adm.Handlers(ctx, s)
			if err != nil {
				continue
			}
			for _, h := range hs {
				if !seen[h] {
					seen[h] = true
					handlers = append(handlers, h)
				}
			}
		}
		return handlers
	})
}

// oneStreamPerCategory returns an indexed stream of every category (Handlers takes a
// stream and answers for its category).
func oneStreamPerCategory(ctx context.Context, adm Admin) []string {
	streams, err := adm.Streams(ctx)
	if err != nil {
		return nil
	}
	seen := map[string]bool{}
	var out []string
	for _, s := range streams {
		c, _, _ := strings.Cut(s, ":")
		if !seen[c] {
			seen[c] = true
			out = append(out, s)
		}
	}
	return out
}

// completeCategories completes --category with the categories that have partitions.
func completeCategories(f *Factory) cobra.CompletionFunc {
	return completeWith(f, nil, func(ctx context.Context, adm Admin, _ []string) []cobra.Completion {
		var categories []cobra.Completion
		for _, s := range oneStreamPerCategory(ctx, adm) {
			c, _, _ := strings.Cut(s, ":")
			categories = append(categories, c)
		}
		return categories
	})
}

// completeOwners completes --owner with the live instances: their ids and their session
// owners (instance.N), as leases name them.
func completeOwners(f *Factory) cobra.CompletionFunc {
	return completeWith(f, nil, func(ctx context.Context, adm Admin, _ []string) []cobra.Completion {
		ins, err := adm.Instances(ctx)
		if err != nil {
			return nil
		}
		var owners []cobra.Completion
		for _, in := range ins {
			if !in.Live {
				continue
			}
			owners = append(owners, cobra.CompletionWithDesc(in.ID, "instance on "+orDash(in.Host)))
			if in.Owner != "" {
				owners = append(owners, cobra.CompletionWithDesc(in.Owner, "current session of "+in.ID))
			}
		}
		return owners
	})
}

// completeDLQIDs completes --id with the STREAM's DLQ entry ids, described by their
// event type and error.
func completeDLQIDs(f *Factory) cobra.CompletionFunc {
	afterStream := func(args []string) bool { return len(args) > 0 }
	return completeWith(f, afterStream, func(ctx context.Context, adm Admin, args []string) []cobra.Completion {
		entries, err := adm.DLQ(ctx, args[0])
		if err != nil {
			return nil
		}
		var ids []cobra.Completion
		for _, e := range entries {
			ids = append(ids, cobra.CompletionWithDesc(e.ID, firstLine(e.Envelope.Type+": "+e.Error, 60)))
		}
		return ids
	})
}
