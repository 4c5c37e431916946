package completion

import (
	"github.com/spf13/cobra"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdtest"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
)

// The tests of this package run seqctl with its commands.
func init() {
	cmdtest.TestRoot = func(f *cmdutil.Factory) *cobra.Command {
		return cmdutil.NewRoot(f, NewCmd(f, nil))
	}
}
