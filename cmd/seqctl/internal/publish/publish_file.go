package publish

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/cmdutil"
	"github.com/seqctl/seqctl/pkg/engine"
)

// fileLine is one line of a file without --event.
type fileLine struct {
	Event    string          `json:"event"`
	Data     json.RawMessage `json:"data"`
	Priority *int            `json:"priority"`
	ID       string          `json:"id"`
}

// lineFailure is a rejected line.
type lineFailure struct {
	Line  int    `json:"line"`
	Error string `json:"error"`
}

// fileSummary is what a file publish prints with -o json.
type fileSummary struct {
	File      string        `json:"file"`
	Lines     int           `json:"lines"` // non-blank lines read
	Published int           `json:"published"`
	Failed    int           `json:"failed"`
	Failures  []lineFailure `json:"failures"`
	// Aborted is the Redis error that stopped the publish, "" when the file was read to
	// the end.
	Aborted string  `json:"aborted,omitempty"`
	Seconds float64 `json:"seconds"`
}

// maxLineBytes bounds one line of a file (an event payload).
const maxLineBytes = 16 << 20

func publishFile(ctx context.Context, opts *Options, p *publisher) error {
	in, name, total, err := openDataFile(opts)
	if err != nil {
		return err
	}
	defer in.Close()
	f := &filePublish{opts: opts, p: p, name: name,
		bar:       &progressBar{w: opts.IO.ErrOut, on: opts.ProgressTTY, total: total},
		sum:       fileSummary{File: name, Failures: []lineFailure{}},
		rows:      bufio.NewWriter(opts.IO.Out),
		printRows: !cmdutil.Structured(opts.Output) && !opts.IO.IsTerminal,
	}
	p.clear = f.bar.clear
	start := time.Now()
	abort := f.publishLines(ctx, in)
	f.bar.done()
	if err := f.rows.Flush(); err != nil && abort == nil {
		abort = err
	}
	if err := p.awaitReplicas(ctx, f.sum.Published); err != nil && abort == nil {
		abort = fmt.Errorf("%s: %w", name, err)
	}
	f.sum.Seconds = time.Since(start).Seconds()
	if abort != nil {
		f.sum.Aborted = abort.Error()
	}
	return f.report(abort)
}

// openDataFile opens the file of --data @FILE, or stdin for @-. It returns the name
// messages give it and, for the progress bar, its number of lines (0: unknown, or no
// bar).
func openDataFile(opts *Options) (in io.ReadCloser, name string, total int, err error) {
	name = strings.TrimPrefix(opts.Data, "@")
	if name == "-" {
		return io.NopCloser(opts.IO.In), "stdin", 0, nil
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, "", 0, &cmdutil.ExitError{Code: cmdutil.ExitUsage, Err: fmt.Errorf("--data @%s: %w", name, errors.Unwrap(err))}
	}
	if opts.ProgressTTY {
		if total = countLines(f); total < 0 {
			f.Close()
			return nil, "", 0, fmt.Errorf("--data @%s: cannot rewind the file after counting its lines", name)
		}
	}
	return f, name, total, nil
}

// filePublish is one publish of a file of events (--data @FILE).
type filePublish struct {
	opts *Options
	p    *publisher
	name string // the file, or "stdin"
	bar  *progressBar
	sum  fileSummary
	// rows gets one row per published event on a pipe (printRows; buffered: a big file
	// is many rows).
	rows      *bufio.Writer
	printRows bool
}

// A file is published a chunk of lines at a time, one PublishMany round trip per chunk:
// at most chunkEvents events or chunkBytes of payload, whichever comes first (a longer
// line is a chunk of its own). Past a few hundred events a round trip's share of an
// event's cost is small, the publish script itself being the rest (a file of 20,000
// lines on loopback: 24k events/s in chunks of 16, 32k in chunks of 256, 35k in chunks
// of 1,024), while a bigger chunk holds more lines in memory, holds back the progress
// bar and the rows longer, and is more to send again after a lost reply. chunkBytes
// keeps a file of big payloads to pipelines of about 1 MiB.
const (
	chunkEvents = 256
	chunkBytes  = 1 << 20
)

// readBufferBytes is how much of the file is read at once: a chunk is also sent when that
// much is used up and no more input is at hand (lineReader.ready).
const readBufferBytes = 1 << 20

// chunk is the events of a file gathered for one PublishMany call.
type chunk struct {
	events []engine.BatchEvent
	lines  []int // lines[i] is the file line of events[i]
	bytes  int   // the payload bytes of events
}

func (c *chunk) full() bool { return len(c.events) >= chunkEvents || c.bytes >= chunkBytes }

func (c *chunk) reset() { c.events, c.lines, c.bytes = c.events[:0], c.lines[:0], 0 }

// publishLines publishes the lines of in, in file order, skipping blank ones. A line
// that cannot be published is reported and skipped; a Redis failure stops the publish
// and is returned, as is a failure to read (once the lines before it are sent). The lines
// are sent a chunk at a time, as soon as it is full or no more input is at hand: a line
// a slow producer pipes in is published without waiting for the next ones.
func (f *filePublish) publishLines(ctx context.Context, in io.Reader) error {
	lines := lineReader{r: bufio.NewReaderSize(in, readBufferBytes), max: maxLineBytes}
	var c chunk
	lineNo := 0
	for {
		raw, err := lines.next()
		if err != nil {
			if serr := f.send(ctx, &c); serr != nil {
				return serr
			}
			if err == io.EOF {
				return nil
			}
			return fmt.Errorf("%s:%d: reading stopped: %w", f.name, lineNo+1, err)
		}
		lineNo++
		f.bar.update(lineNo, f.sum.Failed)
		if raw = bytes.TrimSpace(raw); len(raw) > 0 {
			f.sum.Lines++
			f.add(&c, lineNo, raw)
		}
		if c.full() || !lines.ready() {
			if err := f.send(ctx, &c); err != nil {
				return err
			}
		}
	}
}

// add parses and checks one non-blank line, and adds its event to c; a line that cannot
// be published is counted and reported instead.
func (f *filePublish) add(c *chunk, lineNo int, raw []byte) {
	eventType, id, data, priority, err := parseLine(f.opts, raw)
	if err == nil {
		err = f.p.check(eventType, data, priority)
	}
	if err != nil {
		f.fail(lineNo, err)
		return
	}
	c.events = append(c.events, engine.BatchEvent{Type: eventType, Data: data, ID: id, Priority: priority})
	c.lines = append(c.lines, lineNo)
	c.bytes += len(data)
}

// send publishes the events of c in one round trip (again while Redis is unavailable),
// counts each event appended and prints its row, in file order, and empties c. The error
// that stops the publish names the line of the event that failed: the first one Redis
// refused (the events after it that Redis appended are counted), or the chunk's first
// line when the chunk got no answer (whether its events were appended is then unknown;
// none is counted).
func (f *filePublish) send(ctx context.Context, c *chunk) error {
	if len(c.events) == 0 {
		return nil
	}
	defer c.reset()
	pubs, err := f.p.publishMany(ctx, c.events)
	for i, pub := range pubs {
		if pub.EntryID == "" {
			continue
		}
		f.sum.Published++
		if f.printRows {
			fmt.Fprintf(f.rows, "%d\t%s\t%s\t%s\n", c.lines[i], pub.Stream, pub.EntryID, pub.EventID)
		}
	}
	if err == nil {
		return nil
	}
	line := c.lines[0]
	var be *engine.BatchError
	if errors.As(err, &be) {
		if be.Index >= 0 {
			line = c.lines[be.Index]
		}
		err = be.Err
	}
	return fmt.Errorf("%s:%d: publish stopped: %w", f.name, line, err)
}

// lineReader reads the lines of a file, each into a slice of its own (a chunk keeps its
// lines until it is sent), with its newline. A line longer than max is an error,
// bufio.ErrTooLong, as it is for a bufio.Scanner.
type lineReader struct {
	r   *bufio.Reader
	max int
}

// next returns the next line, or io.EOF after the last.
func (l *lineReader) next() ([]byte, error) {
	var line []byte
	for {
		frag, err := l.r.ReadSlice('\n')
		if len(line)+len(frag) > l.max {
			return nil, bufio.ErrTooLong
		}
		line = append(line, frag...)
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(line) > 0:
			return line, nil // the last line, without a newline
		case err != nil:
			return nil, err
		}
		return line, nil
	}
}

// ready reports whether more input is at hand: reading the next line starts without
// waiting for the file (or the pipe) to give more.
func (l *lineReader) ready() bool { return l.r.Buffered() > 0 }

// fail counts a rejected line and reports it on stderr as FILE:LINE: reason.
func (f *filePublish) fail(line int, err error) {
	f.sum.Failed++
	f.sum.Failures = append(f.sum.Failures, lineFailure{Line: line, Error: err.Error()})
	f.bar.clear()
	fmt.Fprintf(f.opts.IO.ErrOut, "%s:%d: %s\n", f.name, line, err)
}

// report prints the summary (with -o json|yaml on stdout, and always a line on stderr)
// and returns the outcome: the error that stopped the publish, else exit status 2 when
// a line failed.
func (f *filePublish) report(abort error) error {
	ios, sum := f.opts.IO, f.sum
	if cmdutil.Structured(f.opts.Output) {
		if err := cmdutil.WriteData(ios.Out, f.opts.Output, sum); err != nil {
			return err
		}
	}
	mark := ios.Green("✓")
	if sum.Failed > 0 || abort != nil {
		mark = ios.Red("✗")
	}
	rate := ""
	if sum.Seconds > 0 && sum.Published > 0 {
		rate = fmt.Sprintf(", %.0f events/s", float64(sum.Published)/sum.Seconds)
	}
	fmt.Fprintf(ios.ErrOut, "%s %s: published %d of %d events, %d failed (%.2fs%s)\n",
		mark, f.name, sum.Published, sum.Lines, sum.Failed, sum.Seconds, rate)
	switch {
	case abort != nil:
		return abort
	case sum.Failed > 0:
		return &cmdutil.ExitError{Code: cmdutil.ExitUsage} // every failure is already on stderr
	}
	return nil
}

// parseLine decodes one non-blank line: the payload of --event, or an object naming its
// event.
func parseLine(opts *Options, raw []byte) (eventType, id string, data []byte, priority int, err error) {
	if opts.Event != "" {
		return opts.Event, "", raw, opts.Priority, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var fl fileLine
	if err := dec.Decode(&fl); err != nil {
		return "", "", nil, 0, fmt.Errorf(`%s; an event line is {"event": NAME, "data": {...}, "priority": N, "id": ID} (or pass --event when the lines are payloads)`, lineJSONError(raw, err))
	}
	if dec.More() {
		return "", "", nil, 0, errors.New("more than one JSON document on the line")
	}
	if fl.Event == "" {
		return "", "", nil, 0, errors.New(`the line has no "event" (pass --event when the lines are payloads)`)
	}
	if len(fl.Data) == 0 {
		return "", "", nil, 0, errors.New(`the line has no "data"`)
	}
	priority = opts.Priority
	if fl.Priority != nil {
		priority = *fl.Priority
	}
	return fl.Event, fl.ID, fl.Data, priority, nil
}

// lineJSONError says in the user's terms why a line is not an event line: which field
// has the wrong type, which field is unknown, or where the JSON breaks.
func lineJSONError(raw []byte, err error) string {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te) && te.Field == "":
		return fmt.Sprintf("the line is a JSON %s, not an object", jsonKind(raw))
	case errors.As(err, &te):
		want := map[string]string{"event": "a string", "id": "a string", "priority": "an integer", "data": "a JSON object"}[te.Field]
		if want == "" {
			want = "another type"
		}
		return fmt.Sprintf("%q is a JSON %s; it must be %s", te.Field, te.Value, want)
	case errors.As(err, &se):
		return fmt.Sprintf("the line is not valid JSON (at byte %d): %s", se.Offset, strings.TrimPrefix(se.Error(), "json: "))
	}
	msg := strings.TrimPrefix(err.Error(), "json: ")
	if f, ok := strings.CutPrefix(msg, "unknown field "); ok {
		return "unknown field " + f
	}
	if !json.Valid(raw) {
		return "the line is not valid JSON: " + jsonError(raw)
	}
	return msg
}

// countLines counts the lines of a regular file and rewinds it; 0 (unknown) for anything
// else, which is then read once, as it comes.
func countLines(f *os.File) int {
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return 0
	}
	n, last := 0, byte('\n')
	buf := make([]byte, 256<<10)
	for {
		k, err := f.Read(buf)
		n += bytes.Count(buf[:k], []byte{'\n'})
		if k > 0 {
			last = buf[k-1]
		}
		if err != nil {
			break
		}
	}
	if last != '\n' {
		n++
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return -1
	}
	return n
}

// progressBar draws "[#####.....]  1234/5000  24%  2 failed" on one terminal line,
// at most every 100 ms. It draws nothing when off (stderr is not a terminal).
type progressBar struct {
	w     io.Writer
	on    bool
	total int // 0: unknown, only the count is shown
	last  time.Time
	drawn bool
}

const progressWidth = 30

func (b *progressBar) update(n, failed int) {
	if !b.on || time.Since(b.last) < 100*time.Millisecond {
		return
	}
	b.last = time.Now()
	b.draw(n, failed)
}

func (b *progressBar) draw(n, failed int) {
	var line string
	if b.total > 0 {
		n = min(n, b.total)
		fill := n * progressWidth / b.total
		line = fmt.Sprintf("[%s%s] %d/%d lines %3d%%", strings.Repeat("#", fill), strings.Repeat(".", progressWidth-fill), n, b.total, n*100/b.total)
	} else {
		line = fmt.Sprintf("%d lines", n)
	}
	if failed > 0 {
		line += fmt.Sprintf("  %d failed", failed)
	}
	fmt.Fprintf(b.w, "\r\x1b[2K%s", line)
	b.drawn = true
}

// clear erases the bar so a message can be printed on a clean line.
func (b *progressBar) clear() {
	if b.on && b.drawn {
		fmt.Fprint(b.w, "\r\x1b[2K")
		b.drawn = false
	}
}

// done erases the bar for the summary.
func (b *progressBar) done() { b.clear() }
