package head

import (
	"github.com/spf13/cobra"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/audit"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdtest"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/dlq"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/partitions"
)

// The tests of this package run seqctl with its commands.
func init() {
	cmdtest.TestRoot = func(f *cmdutil.Factory) *cobra.Command {
		return cmdutil.NewRoot(f, NewCmd(f), dlq.NewCmd(f), audit.NewCmd(f, nil), partitions.NewCmd(f))
	}
}
