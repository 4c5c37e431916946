package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
)

// errNotPgx: the *sql.DB was not opened with the pgx driver, so LISTEN is not available.
var errNotPgx = errors.New("outbox: the PostgreSQL database was not opened with the pgx driver (use outbox.Open); LISTEN/NOTIFY is off and the relay polls every PollInterval")

// listen keeps one connection LISTENing on the table's channel and wakes the relay on each
// notification (the insert trigger sends one per committed insert, collapsed per
// transaction and category). A lost connection is re-established with backoff; meanwhile
// the relay polls every PollInterval. It returns when ctx is done.
func (r *Relay) listen(ctx context.Context) {
	delay := 100 * time.Millisecond
	for {
		err := r.listenOnce(ctx)
		r.listening.Store(false)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errNotPgx) {
			r.log.Warn(err.Error(), "table", r.o.table)
			return
		}
		r.log.Warn("outbox relay: LISTEN connection lost; polling until it is back",
			"table", r.o.table, "poll_interval", r.cfg.PollInterval, "retry_in", delay, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(delay*2, 5*time.Second)
	}
}

func (r *Relay) listenOnce(ctx context.Context) error {
	channel, err := r.o.channel(ctx)
	if err != nil {
		return err
	}
	conn, err := r.o.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("outbox: connect for LISTEN: %w", err)
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return errNotPgx
		}
		pc := sc.Conn()
		// Never hand a LISTENing connection back to the pool: close it, and database/sql
		// discards it.
		defer func() {
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_ = pc.Close(cctx)
		}()
		if _, err := pc.Exec(ctx, "LISTEN "+pgIdent(channel)); err != nil {
			return fmt.Errorf("outbox: LISTEN %s: %w", channel, err)
		}
		r.listening.Store(true)
		r.Wake() // rows committed before the LISTEN took effect
		for {
			if _, err := pc.WaitForNotification(ctx); err != nil {
				return fmt.Errorf("outbox: wait for NOTIFY on %s: %w", channel, err)
			}
			r.Wake()
		}
	})
}

// channel resolves the NOTIFY channel of the table: the schema is the one the table was
// found in through search_path, as in the trigger Migrate created.
func (o *Outbox) channel(ctx context.Context) (string, error) {
	var schema string
	err := o.db.QueryRowContext(ctx,
		"SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass($1)",
		o.table).Scan(&schema)
	if err != nil {
		return "", fmt.Errorf("outbox: find the schema of table %s (did Migrate run?): %w", o.table, err)
	}
	return notifyChannel(schema, o.table), nil
}
