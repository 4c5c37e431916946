package cmdutil

import (
	"context"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// completionTimeout bounds a dynamic completion's Redis calls: a shell must not hang.
const completionTimeout = 3 * time.Second

// CompleteWith returns a completion function offering, of the candidates list finds
// with an admin connection (values, or values with a description: see
// cobra.CompletionWithDesc), those whose value starts with the word being completed.
// want (nil: always) says from the arguments so far whether the word is completed at
// all, before connecting. It offers nothing when Redis cannot be reached in time, and
// never file names.
func CompleteWith(f *Factory, want func(args []string) bool, list func(ctx context.Context, adm Admin, args []string) []cobra.Completion) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if want != nil && !want(args) {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(OrBackground(cmd.Context()), completionTimeout)
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

// CompleteStreams completes the STREAM argument with the indexed partition streams.
func CompleteStreams(f *Factory) cobra.CompletionFunc {
	noStreamYet := func(args []string) bool { return len(args) == 0 }
	return CompleteWith(f, noStreamYet, func(ctx context.Context, adm Admin, _ []string) []cobra.Completion {
		streams, err := adm.Streams(ctx)
		if err != nil {
			return nil
		}
		return streams
	})
}

// CompleteHandlers completes --handler with the consumer groups of the STREAM's
// category, or of every category when the command has no STREAM (partitions list).
func CompleteHandlers(f *Factory) cobra.CompletionFunc {
	return CompleteWith(f, nil, func(ctx context.Context, adm Admin, args []string) []cobra.Completion {
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

// CompleteCategories completes --category with the categories that have partitions.
func CompleteCategories(f *Factory) cobra.CompletionFunc {
	return CompleteWith(f, nil, func(ctx context.Context, adm Admin, _ []string) []cobra.Completion {
		var categories []cobra.Completion
		for _, s := range oneStreamPerCategory(ctx, adm) {
			c, _, _ := strings.Cut(s, ":")
			categories = append(categories, c)
		}
		return categories
	})
}

// CompleteOwners completes --owner with the live instances: their ids and their session
// owners (instance.N), as leases name them.
func CompleteOwners(f *Factory) cobra.CompletionFunc {
	return CompleteWith(f, nil, func(ctx context.Context, adm Admin, _ []string) []cobra.Completion {
		ins, err := adm.Instances(ctx)
		if err != nil {
			return nil
		}
		var owners []cobra.Completion
		for _, in := range ins {
			if !in.Live {
				continue
			}
			owners = append(owners, cobra.CompletionWithDesc(in.ID, "instance on "+OrDash(in.Host)))
			if in.Owner != "" {
				owners = append(owners, cobra.CompletionWithDesc(in.Owner, "current session of "+in.ID))
			}
		}
		return owners
	})
}

// CompleteDLQIDs completes --id with the STREAM's DLQ entry ids, described by their
// event type and error.
func CompleteDLQIDs(f *Factory) cobra.CompletionFunc {
	afterStream := func(args []string) bool { return len(args) > 0 }
	return CompleteWith(f, afterStream, func(ctx context.Context, adm Admin, args []string) []cobra.Completion {
		entries, err := adm.DLQ(ctx, args[0])
		if err != nil {
			return nil
		}
		var ids []cobra.Completion
		for _, e := range entries {
			ids = append(ids, cobra.CompletionWithDesc(e.ID, FirstLine(e.Envelope.Type+": "+e.Error, 60)))
		}
		return ids
	})
}
