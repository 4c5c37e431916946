package cmdutil

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/seqctl/seqctl/pkg/keyspace"
)

// ResolveHandler returns handler when it is set, else the category's only handler. A
// category with several handlers is a usage error listing them; one with none is not
// found.
func ResolveHandler(ctx context.Context, adm Admin, command, stream, handler string) (string, error) {
	if handler != "" {
		return handler, nil
	}
	hs, err := adm.Handlers(ctx, stream)
	if err != nil {
		return "", ExitFor(err)
	}
	switch len(hs) {
	case 0:
		return "", &ExitError{Code: ExitNotFound, Err: fmt.Errorf("no handler reads %s (no consumer group is registered for its category)", stream)}
	case 1:
		return hs[0], nil
	}
	return "", UsageErrorf(command, "%s has %d handlers (%s): pass --handler", stream, len(hs), strings.Join(hs, ", "))
}

// CheckEntryID rejects an id given to flag that is not the id of one entry
// (keyspace.ParseEntryID: MILLISECONDS-SEQUENCE; a bare millisecond names none).
func CheckEntryID(command, flag, id string) error {
	if id == "" {
		return nil
	}
	_, err := keyspace.ParseEntryID(id)
	return entryIDFlagError(command, flag, err)
}

// CheckRangeEnd rejects an id given to flag that cannot end a range of entries
// (keyspace.ParseRangeEnd: a bare millisecond takes in every entry of it).
func CheckRangeEnd(command, flag, id string) error {
	if id == "" {
		return nil
	}
	_, err := keyspace.ParseRangeEnd(id)
	return entryIDFlagError(command, flag, err)
}

// entryIDFlagError is the usage error of a flag whose id keyspace refused (err), nil
// for none.
func entryIDFlagError(command, flag string, err error) error {
	var ie *keyspace.StreamIDError
	if !errors.As(err, &ie) {
		return err
	}
	return UsageErrorf(command, "invalid value %q for %s: %s (copy it from 'seqctl head show' or 'seqctl dlq list')", ie.ID, flag, ie.Reason)
}
