package head

import (
	"github.com/spf13/cobra"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/audit"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdtest"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/dlq"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/partitions"
)

// The tests of this package run seqctl with these commands.
func init() {
	cmdtest.SetCommands(func(f *cmdutil.Factory) []*cobra.Command {
		return []*cobra.Command{NewCmd(f), dlq.NewCmd(f), audit.NewCmd(f, nil), partitions.NewCmd(f)}
	})
}
