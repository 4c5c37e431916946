// Package completion is 'seqctl completion': the shell completion scripts.
package completion

import (
	"io"

	"github.com/spf13/cobra"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
)

// Options are the inputs of 'seqctl completion'.
type Options struct {
	IO    *cmdutil.IOStreams
	Shell string // bash, zsh or fish
	// Root is the command tree the script completes.
	Root *cobra.Command
}

// NewCmd returns the 'seqctl completion' command; runF, when not nil, runs in place of
// its work with the options the flags gave (tests).
func NewCmd(f *cmdutil.Factory, runF func(*Options) error) *cobra.Command {
	opts := &Options{IO: f.IOStreams}
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
				return cmdutil.UsageErrorf(cmd.CommandPath(), "name one shell: bash, zsh or fish")
			}
			switch args[0] {
			case "bash", "zsh", "fish":
				return nil
			}
			return cmdutil.UsageErrorf(cmd.CommandPath(), "unsupported shell %q: want bash, zsh or fish", args[0])
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

func completionRun(opts *Options) error {
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
