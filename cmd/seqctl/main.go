// Command seqctl runs and operates per-key ordered event processing on Redis Streams.
package main

import (
	"os"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cli"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], cmdutil.System()))
}
