// Command seqctl runs and operates per-key ordered event processing on Redis Streams.
package main

import (
	"os"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/cmd/seqctl/internal/root"
)

func main() {
	os.Exit(root.Main(os.Args[1:], cmdutil.System()))
}
