package admin

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/pkg/keyspace"
)

// Instance is one registered engine instance (engine.InstancesKey).
type Instance struct {
	ID string `json:"id"`
	// Owner is the current session owner "{id}.{incarnation}": leases name it.
	Owner       string    `json:"owner"`
	Host        string    `json:"host"`
	PID         int       `json:"pid"`
	StartedAt   time.Time `json:"started_at"`
	HeartbeatAt time.Time `json:"heartbeat_at"`
	// Live says the session key exists; SessionTTLMS is its time left (0 when not live).
	Live         bool  `json:"live"`
	SessionTTLMS int64 `json:"session_ttl_ms"`
	// Handler slots as of the last heartbeat: calls running, the instance's limit (0:
	// unbounded) and the partitions waiting for a slot (waiting is not failing).
	SlotsInUse   int `json:"slots_in_use"`
	SlotsLimit   int `json:"slots_limit"`
	SlotsWaiting int `json:"slots_waiting"`
	// Throttled lists, as of the last registry write, the partitions waiting for a
	// permit of their handler's limit key (at most keyspace.MaxThrottledListed);
	// ThrottledTotal counts them all.
	Throttled      []keyspace.ThrottledUnit `json:"throttled,omitempty"`
	ThrottledTotal int                      `json:"throttled_total,omitempty"`
}

// Instances lists the registered engine instances, sorted by id, with the liveness of
// their sessions. Two round trips.
func (a *Admin) Instances(ctx context.Context) ([]Instance, error) {
	raw, err := a.rdb.HGetAll(ctx, a.keys.InstancesKey()).Result()
	if err != nil {
		return nil, translate(err)
	}
	out := make([]Instance, 0, len(raw))
	for id, v := range raw {
		info, err := keyspace.DecodeInstance(v)
		if err != nil {
			out = append(out, Instance{ID: id})
			continue
		}
		if info.ID != "" {
			id = info.ID // the field is "{id}#{random}", one per process
		}
		out = append(out, Instance{
			ID: id, Owner: info.Owner, Host: info.Host, PID: info.PID,
			StartedAt: time.UnixMilli(info.StartedMS).UTC(), HeartbeatAt: time.UnixMilli(info.HeartbeatMS).UTC(),
			SlotsInUse: info.SlotsInUse, SlotsLimit: info.SlotsLimit, SlotsWaiting: info.SlotsWaiting,
			Throttled: info.Throttled, ThrottledTotal: info.ThrottledTotal,
		})
	}
	slices.SortFunc(out, func(x, y Instance) int { return strings.Compare(x.ID, y.ID) })
	pipe := a.rdb.Pipeline()
	ttls := make([]*redis.DurationCmd, len(out))
	for i, in := range out {
		if in.Owner != "" {
			ttls[i] = pipe.PTTL(ctx, a.keys.SessionKey(in.Owner))
		}
	}
	if err := execTolerant(ctx, pipe); err != nil {
		return nil, err
	}
	for i := range out {
		if c := ttls[i]; c != nil && c.Err() == nil {
			live, remaining := keyspace.SessionLife(c.Val())
			out[i].Live, out[i].SessionTTLMS = live, remaining.Milliseconds()
		}
	}
	return out, nil
}
