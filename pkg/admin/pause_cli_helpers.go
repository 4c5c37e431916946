package admin

import (
	"context"

	"github.com/seqctl/seqctl/pkg/engine"
)

// PauseOf reads the pause record of a partition for a handler: nil when it is not
// paused. 'seqctl partitions inspect' shows it. Errors: ErrNotFound for an unknown
// handler, ErrInvalidStream for a bad partition name.
func (a *Admin) PauseOf(ctx context.Context, stream, handler string) (*engine.PauseRecord, error) {
	ref, err := a.pauseRef(ctx, PauseRequest{Stream: stream, Handler: handler}, &PauseResult{})
	if err != nil {
		return nil, err
	}
	rec, err := a.broker.Paused(ctx, ref)
	return rec, translate(err)
}
