package partitions

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"runtime/debug"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/pkg/admin"
)

// listGCPercent is the GC target of a streamed listing (see streamPartitions).
const listGCPercent = 400

// streams reports whether 'partitions list' prints its rows page by page as they are
// read (memory bounded by a page, the first rows at once) rather than the whole list
// sorted: -o json and the tab-separated rows of a pipe do, unless --sort was given (a
// total order needs the whole list). An aligned table (a terminal, -o table, -o wide)
// and -o yaml are read whole: their columns and documents span every row.
func (o *PartitionsListOptions) streams() bool {
	switch {
	case o.SortGiven:
		return false
	case o.Output == "json":
		return true
	}
	return o.Output == "" && !o.IO.IsTerminal
}

// streamPartitions prints the partitions page by page (admin.EachPartition), flushing
// each page: tab-separated rows, or -o json as the same indented array that printPartitions writes, one element at a
// time. If the listing fails halfway the array is left open, so a consumer cannot take a
// truncated list for a whole one; the error goes to stderr as always.
func streamPartitions(ctx context.Context, adm cmdutil.Admin, opts *PartitionsListOptions, filter admin.Filter) error {
	// The live heap is a page or two whatever the list's length, so the default GC
	// target collects every few pages; at 400 % it collects a quarter as often, which
	// took a third off the command's CPU over 200,000 partitions, for about 20 MB more
	// (docs/benchmarks.md).
	defer debug.SetGCPercent(debug.SetGCPercent(listGCPercent))
	ios := opts.IO
	out := bufio.NewWriterSize(ios.Out, 64<<10)
	n := 0
	var elem bytes.Buffer
	err := adm.EachPartition(ctx, filter, func(ps []admin.Partition) error {
		admin.SortPartitions(ps, admin.SortBy(opts.Sort))
		if opts.Output == "json" {
			for _, p := range ps {
				// MarshalJSON's output is compact and escaped already: indenting it
				// gives the bytes of json.MarshalIndent without its second pass.
				b, err := p.MarshalJSON()
				if err != nil {
					return err
				}
				elem.Reset()
				if err := json.Indent(&elem, b, "  ", "  "); err != nil {
					return err
				}
				sep := ",\n  "
				if n == 0 {
					sep = "[\n  "
				}
				out.WriteString(sep)
				out.Write(elem.Bytes())
				n++
			}
		} else {
			if err := partitionTable(opts, ps).Render(out); err != nil {
				return err
			}
			n += len(ps)
		}
		return out.Flush()
	})
	if err != nil {
		_ = out.Flush()
		return cmdutil.ExitFor(err)
	}
	switch {
	case opts.Output == "json" && n == 0:
		out.WriteString("[]\n")
	case opts.Output == "json":
		out.WriteString("\n]\n")
	case n == 0 && ios.IsTerminal:
		fmt.Fprintln(ios.ErrOut, "No partitions match.")
	}
	return out.Flush()
}
