package cmdutil

import (
	"errors"
	"fmt"

	"github.com/seqctl/seqctl/cmd/seqctl/internal/redisconn"
	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/config"
	"github.com/seqctl/seqctl/pkg/engine"
	"github.com/seqctl/seqctl/pkg/keyspace"
)

// Exit codes of seqctl. Scripts rely on them; they never change meaning.
const (
	// ExitOK: the command did what was asked.
	ExitOK = 0
	// ExitFailure: anything else went wrong (Redis unreachable, a handler failed, ...).
	ExitFailure = 1
	// ExitUsage: a bad command line, or an invalid domain.toml / domain registration.
	ExitUsage = 2
	// ExitNotFound: the named partition, head entry or DLQ entry does not exist.
	ExitNotFound = 3
	// ExitConflict: a compare-and-act lost: the head moved, or the caller was fenced.
	ExitConflict = 4
)

// ExitError carries an explicit exit code. A nil Err means the command has already told
// the user everything and nothing more is printed.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// UsageError is a mistake on the command line. It is printed with a pointer to the
// command's --help and exits with ExitUsage.
type UsageError struct {
	// Command is the command path, e.g. "seqctl validate".
	Command string
	Err     error
}

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// UsageErrorf returns a *UsageError for the command path.
func UsageErrorf(command, format string, args ...any) error {
	return &UsageError{Command: command, Err: fmt.Errorf(format, args...)}
}

// ExitCode maps an error to the exit code of the process, in one place:
//
//	nil                                                  0
//	*ExitError                                           its Code
//	*UsageError, *config.Error,
//	*engine.IncorrectUsageError, a bad Redis setting     2
//	anything else                                        1
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	var ue *UsageError
	var ce *config.Error
	var iue *engine.IncorrectUsageError
	var se *redisconn.SettingError
	if errors.As(err, &ue) || errors.As(err, &ce) || errors.As(err, &iue) || errors.As(err, &se) {
		return ExitUsage
	}
	return ExitFailure
}

// ExitFor gives an operator error its exit code: not found 3, head moved or fenced 4,
// an invalid stream name 2; others keep theirs (1, or 2 for a config error).
func ExitFor(err error) error {
	var ee *ExitError
	switch {
	case err == nil, errors.As(err, &ee):
		return err
	case errors.Is(err, admin.ErrNotFound), errors.Is(err, engine.ErrEntryGone):
		return &ExitError{Code: ExitNotFound, Err: err}
	case errors.Is(err, engine.ErrHeadMoved), errors.Is(err, engine.ErrFenced):
		return &ExitError{Code: ExitConflict, Err: err}
	case errors.Is(err, admin.ErrInvalidStream), errors.Is(err, keyspace.ErrInvalidStreamID):
		return &ExitError{Code: ExitUsage, Err: err}
	}
	return err
}
