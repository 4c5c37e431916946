package run

import (
	"github.com/spf13/cobra"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdtest"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/head"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/inbox"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/publish"
)

// The tests of this package run seqctl with these commands.
func init() {
	cmdtest.SetCommands(func(f *cmdutil.Factory) []*cobra.Command {
		return []*cobra.Command{NewCmd(f, nil), publish.NewCmd(f, nil), inbox.NewCmd(f), head.NewCmd(f)}
	})
}
