package verify

import (
	"github.com/spf13/cobra"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdtest"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
)

// The tests of this package run seqctl with this command.
func init() {
	cmdtest.SetCommands(func(f *cmdutil.Factory) []*cobra.Command {
		return []*cobra.Command{NewCmd(f)}
	})
}
