package cli

import (
	"context"
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
Redis, or the categories of --config), handler names for --handler, and DLQ entry ids
for 'dlq replay --id'. Dynamic completion uses the same --redis-url / --config /
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
		return opts.Root.GenBashCompletionV2(w, true)
	case "zsh":
		return opts.Root.GenZshCompletion(w)
	default:
		return opts.Root.GenFishCompletion(w, true)
	}
}

// completionTimeout bounds a dynamic completion's Redis calls: a shell must not hang.
const completionTimeout = 3 * time.Second

// withCompletionAdmin runs fn with an admin connection, returning no completions when
// Redis cannot be reached in time.
func withCompletionAdmin(f *Factory, cmd *cobra.Command, fn func(ctx context.Context, adm Admin) []string) []string {
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, completionTimeout)
	defer cancel()
	adm, closeAdm, err := f.openAdmin(ctx)
	if err != nil {
		return nil
	}
	defer closeAdm()
	return fn(ctx, adm)
}

// completeStreams completes the STREAM argument with the indexed partition streams.
func completeStreams(f *Factory) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		out := withCompletionAdmin(f, cmd, func(ctx context.Context, adm Admin) []string {
			streams, err := adm.Streams(ctx)
			if err != nil {
				return nil
			}
			var keep []string
			for _, s := range streams {
				if strings.HasPrefix(s, toComplete) {
					keep = append(keep, s)
				}
			}
			return keep
		})
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeHandlers completes --handler with the consumer groups of the STREAM's
// category.
func completeHandlers(f *Factory) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) == 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		out := withCompletionAdmin(f, cmd, func(ctx context.Context, adm Admin) []string {
			hs, err := adm.Handlers(ctx, args[0])
			if err != nil {
				return nil
			}
			var keep []string
			for _, h := range hs {
				if strings.HasPrefix(h, toComplete) {
					keep = append(keep, h)
				}
			}
			return keep
		})
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeDLQIDs completes --id with the STREAM's DLQ entry ids, described by their
// event type and error.
func completeDLQIDs(f *Factory) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) == 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		out := withCompletionAdmin(f, cmd, func(ctx context.Context, adm Admin) []string {
			entries, err := adm.DLQ(ctx, args[0])
			if err != nil {
				return nil
			}
			var keep []string
			for _, e := range entries {
				if strings.HasPrefix(e.ID, toComplete) {
					keep = append(keep, cobra.CompletionWithDesc(e.ID, firstLine(e.Envelope.Type+": "+e.Error, 60)))
				}
			}
			return keep
		})
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}
