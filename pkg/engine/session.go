package engine

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/pkg/keyspace"
)

// session is the instance's liveness in Redis. Every lease the instance holds is valid
// only while the session key of its incarnation exists, so one PEXPIRE per heartbeat
// renews all of them, however many partitions are owned.
//
// Lifecycle. The heartbeat goroutine is the only one that opens and closes incarnations,
// so there is never more than one at a time:
//
//   - open: a fresh owner name "{instance id}.{random}" is created with SET NX, so two
//     processes started with the same --instance-id never share a fence.
//   - live: each renewal that Redis confirms moves the local lease deadline (the time the
//     renewal was sent + TTL - margin). A timer cancels the incarnation's context when
//     the deadline passes, so a handler stops before any other instance may take its
//     partition, even when the link to Redis is frozen and no call returns.
//   - over: the session key is gone (Redis restarted or lost data, or this process stalled
//     past the TTL), the deadline passed, or a fenced script said so. The context is
//     cancelled at once, synchronously, by whoever noticed; the heartbeat goroutine then
//     waits for the old workers to exit, deletes the old session key if Redis answers
//     (so other instances take the partitions at once) and opens the next incarnation,
//     retrying every heartbeat interval until Redis lets it.
//
// A heartbeat error that is not a loss (a timeout, an out-of-memory reply to the
// registry write) changes nothing while the deadline holds: the leases stay.
type session struct {
	e *Engine
	// rdb is the session's own client (sessionClient): its opening, renewals and, on
	// Redis Cluster, the lease renewals never wait behind the engine's other calls.
	rdb redis.UniversalClient

	mu     sync.Mutex
	cur    *incarnation // the live or last incarnation; nil before the first open; guarded by mu
	reason string       // why there is no live incarnation ("" when live); guarded by mu

	over    chan struct{} // capacity 1: an incarnation ended; wakes the heartbeat loop
	quiet   atomic.Bool   // abandoned by a failed Start: an ending incarnation says nothing
	started time.Time
	host    string
	// The registry entry written last (see beat), and how many beats ago; owned by the
	// heartbeat loop.
	regSlots     SlotStats
	regThrottled int
	regAgo       int
}

// registryBeats is how many heartbeats may pass without a write of the instance's
// registry entry while its handler slots stay as they are: the entry is advisory (fair
// share counts instances by their sessions, operators see the last heartbeat), and its
// write is a Redis call per beat.
const registryBeats = 3

// incarnation is one life of the session: its owner name, the context every worker of
// this life derives from, and the local lease deadline.
type incarnation struct {
	owner  string
	ttl    time.Duration
	margin time.Duration
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	deadline time.Time   // monotonic; guarded by mu
	timer    *time.Timer // fires at deadline; guarded by mu
	onOver   func(*incarnation, string)
	ended    atomic.Bool // end ran
}

// errDeadline is the cause of an incarnation that outlived its local lease deadline.
var errDeadline = errors.New("engine: local lease deadline passed without a confirmed renewal")

func newSession(e *Engine) *session {
	host, _ := os.Hostname()
	return &session{e: e, rdb: sessionClient(e.rdb), host: host, over: make(chan struct{}, 1)}
}

// sessionClient returns a client of its own for the session, with c's options, so that
// the renewals have connections that nothing else holds: a blocking read of the
// doorbell, or go-redis refusing new connections for up to a second after PoolSize
// failed dials (an outage trips that back-off while every worker retries), would
// otherwise delay the first renewals after Redis comes back past a short lease TTL, and
// a session just opened would be lost again. It opens connections only as the session
// uses them (one or two); a client of another kind is used as it is. A named client's
// session connections carry its name with sessionNameSuffix, so that CLIENT LIST tells
// them apart.
func sessionClient(c redis.UniversalClient) redis.UniversalClient {
	switch c := c.(type) {
	case *redis.Client:
		o := *c.Options()
		o.MinIdleConns, o.ClientName = 0, SessionConnName(o.ClientName)
		return redis.NewClient(&o)
	case *redis.ClusterClient:
		o := *c.Options()
		o.MinIdleConns, o.ClientName = 0, SessionConnName(o.ClientName)
		return redis.NewClusterClient(&o)
	}
	return c
}

// sessionNameSuffix ends the connection name of a named client's session connections.
const sessionNameSuffix = "-session"

// SessionConnName is the connection name of the session client of an engine whose
// client is named name ("" stays ""): CLIENT LIST shows both.
func SessionConnName(name string) string {
	if name == "" {
		return ""
	}
	return name + sessionNameSuffix
}

// release closes the session's own client.
func (s *session) release() {
	if s.rdb != s.e.rdb {
		_ = s.rdb.Close()
	}
}

// margin is subtracted from the lease TTL for the local deadline: the time it may take
// the renewal to reach Redis plus clock-rate differences.
func leaseMargin(ttl time.Duration) time.Duration {
	return max(ttl/5, 20*time.Millisecond)
}

// extend moves the deadline to sent + TTL - margin (never backwards) and re-arms the
// timer. sent is when the confirmed renewal (or the creating SET) was sent.
func (in *incarnation) extend(sent time.Time) {
	d := sent.Add(in.ttl - in.margin)
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.ctx.Err() != nil || !d.After(in.deadline) {
		return
	}
	in.deadline = d
	if in.timer == nil {
		in.timer = time.AfterFunc(time.Until(d), in.fire)
	} else {
		in.timer.Reset(time.Until(d))
	}
}

// fire runs on the timer: past the deadline the incarnation is over; a renewal that
// raced with the timer re-arms it.
func (in *incarnation) fire() {
	in.mu.Lock()
	left := time.Until(in.deadline)
	if left > 0 {
		in.timer.Reset(left)
		in.mu.Unlock()
		return
	}
	in.mu.Unlock()
	in.end(errDeadline, "the local lease deadline passed without a confirmed renewal (Redis unreachable or too slow)")
}

// valid reports whether an event may be started now: before the local deadline.
func (in *incarnation) valid() bool {
	in.mu.Lock()
	ok := time.Now().Before(in.deadline)
	in.mu.Unlock()
	if !ok {
		in.fire()
	}
	return ok && in.ctx.Err() == nil
}

// end cancels the incarnation and tells the session, once: later and concurrent calls
// do nothing.
func (in *incarnation) end(cause error, reason string) {
	if !in.ended.CompareAndSwap(false, true) {
		return
	}
	in.cancel(cause)
	in.mu.Lock()
	if in.timer != nil {
		in.timer.Stop()
	}
	in.mu.Unlock()
	in.onOver(in, reason)
}

// live returns the live incarnation, or nil while there is none.
func (s *session) live() *incarnation {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil || s.cur.ctx.Err() != nil {
		return nil
	}
	return s.cur
}

// current returns the owner name and context of the last incarnation (cancelled when it
// is over).
func (s *session) current() (string, context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil {
		return "", nil
	}
	return s.cur.owner, s.cur.ctx
}

// status says why the instance has no live session ("" when it has one).
func (s *session) status() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil {
		return "no session opened yet"
	}
	if s.cur.ctx.Err() != nil {
		return "no session: " + s.reason
	}
	return ""
}

// lose ends the incarnation in: called by anyone who learns that its session key is gone
// (the heartbeat, discovery, a fenced script). Safe to call concurrently and repeatedly:
// only the first call for a live incarnation has an effect, and only the heartbeat loop
// opens the next one.
func (s *session) lose(in *incarnation, reason string) {
	if in == nil {
		return
	}
	in.end(ErrSessionLost, reason)
}

// ended is each incarnation's onOver: it records why and wakes the heartbeat loop.
func (s *session) ended(in *incarnation, reason string) {
	s.mu.Lock()
	if s.cur == in {
		s.reason = reason
	}
	s.mu.Unlock()
	if s.quiet.Load() {
		return
	}
	if !s.e.stopping() {
		s.e.log.Warn("session over: every lease of this incarnation is dropped; a new one opens when Redis allows",
			"owner", in.owner, "reason", reason)
	}
	select {
	case s.over <- struct{}{}:
	default:
	}
}

// newOwner returns a fresh owner name: the instance id, a dot, and 8 random characters.
func (s *session) newOwner() string { return keyspace.Owner(s.e.cfg.InstanceID, randomToken()) }

// randomToken returns 8 random characters of [a-z2-7].
func randomToken() string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

// open creates a new incarnation: a new owner name whose session key is created with NX
// (a name in use is never adopted), and the instance's registry entry.
func (s *session) open(ctx context.Context) error {
	if s.started.IsZero() {
		s.started = time.Now()
	}
	ttl := s.e.cfg.Timing.LeaseTTL
	// Every group the domain declares is registered before the session exists, so no
	// lease is used while the registry is incomplete (after Redis lost it, say).
	if err := s.e.registerGroups(ctx); err != nil {
		return err
	}
	s.warnSameID(ctx)
	for try := 0; ; try++ {
		owner := s.newOwner()
		sent := time.Now()
		created, err := s.rdb.SetNX(ctx, s.e.keys.SessionKey(owner), s.e.cfg.InstanceID, ttl).Result()
		if err != nil {
			return translateRedisErr(err)
		}
		if !created {
			if try < 3 {
				continue
			}
			return fmt.Errorf("engine: could not create a unique session key for instance %s", s.e.cfg.InstanceID)
		}
		sctx, cancel := context.WithCancelCause(s.e.hardCtx)
		in := &incarnation{owner: owner, ttl: ttl, margin: leaseMargin(ttl), ctx: sctx, cancel: cancel, onOver: s.ended}
		in.extend(sent)
		s.mu.Lock()
		s.cur, s.reason = in, ""
		s.mu.Unlock()
		// The registry entry is advisory (fair share, operators): a failure to write it
		// (out of memory, say) does not stop the session; the next heartbeat writes it.
		if err := s.rdb.HSet(ctx, s.e.keys.InstancesKey(), s.e.regID, s.info(owner)).Err(); err != nil {
			s.e.logs.warn("registry", "cannot write the instance registry entry", "err", translateRedisErr(err))
		}
		// What this instance knew of the others' sessions may be gone with its own (Redis
		// lost its data, a failover); and the others count this one at once.
		s.e.lives.forget()
		_ = announce(ctx, s.rdb, s.e.keys, keyspace.Notice{Op: keyspace.NoticeInstance})
		s.e.log.Info("session opened", "owner", owner)
		return nil
	}
}

// warnSameID logs when a live process already runs under this instance id: both work
// (each has its own owner name, fence and registry entry) but operators should give
// them distinct ids.
func (s *session) warnSameID(ctx context.Context) {
	all, err := s.rdb.HGetAll(ctx, s.e.keys.InstancesKey()).Result()
	if err != nil {
		return
	}
	for field, raw := range all {
		info, err := keyspace.DecodeInstance(raw)
		if field == s.e.regID || err != nil || info.ID != s.e.cfg.InstanceID || info.Owner == "" {
			continue
		}
		if n, err := s.rdb.Exists(ctx, s.e.keys.SessionKey(info.Owner)).Result(); err == nil && n == 1 {
			s.e.log.Warn("another live process uses this instance id; this one works under its own owner name and fence, but give each process a distinct --instance-id",
				"instance", s.e.cfg.InstanceID, "other_owner", info.Owner, "other_host", info.Host, "other_pid", info.PID)
			return
		}
	}
}

func (s *session) info(owner string) string {
	slots, _ := s.e.slots.stats()
	throttled, n := s.e.limits.throttled(keyspace.MaxThrottledListed)
	return keyspace.Instance{
		ID: s.e.cfg.InstanceID, Owner: owner, Host: s.host, PID: os.Getpid(),
		StartedMS: s.started.UnixMilli(), HeartbeatMS: time.Now().UnixMilli(),
		SlotsInUse: slots.InUse, SlotsLimit: slots.Limit, SlotsWaiting: slots.Waiting,
		Throttled: throttled, ThrottledTotal: n,
	}.Encode()
}

// heartbeatLoop renews the session every HeartbeatInterval and, when an incarnation is
// over, opens the next one. It never waits on handlers, except for the old workers'
// exit before a new incarnation opens.
func (s *session) heartbeatLoop() {
	defer s.e.bg.Done()
	t := time.NewTicker(s.e.cfg.Timing.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-s.e.hardCtx.Done():
			return
		case <-t.C:
		case <-s.over:
		}
		// While stopping, keep renewing: in-flight events still hold their leases until
		// Shutdown releases them. Never open a new incarnation then.
		if in := s.live(); in != nil {
			s.beat(in)
		} else if !s.e.stopping() {
			s.reopen()
		}
	}
}

// beat renews the incarnation's session key, unless the engine's own calls have failed
// for a lease TTL: the leases are then given up (see callHealth).
func (s *session) beat(in *incarnation) {
	ttl := s.e.cfg.Timing.LeaseTTL
	if d, err := s.e.calls.failing(); d > ttl {
		s.lose(in, fmt.Sprintf("the engine's own calls to Redis have failed for %s while the session's renewals succeed (%v); its partitions go to other instances", d.Round(time.Second), err))
		return
	}
	ctx, cancel := context.WithTimeout(in.ctx, ttl/2)
	defer cancel()
	sent := time.Now()
	pipe := s.rdb.Pipeline()
	renewed := pipe.PExpire(ctx, s.e.keys.SessionKey(in.owner), ttl)
	var reg *redis.IntCmd
	// A stopping instance has left the registry already; else the entry is written when
	// the handler slots changed, and every registryBeats beats.
	slots, _ := s.e.slots.stats()
	_, throttled := s.e.limits.throttled(0)
	if s.regAgo++; !s.e.stopping() && (slots != s.regSlots || throttled != s.regThrottled || s.regAgo >= registryBeats) {
		reg = pipe.HSet(ctx, s.e.keys.InstancesKey(), s.e.regID, s.info(in.owner))
		s.regSlots, s.regThrottled, s.regAgo = slots, throttled, 0
	}
	_, _ = pipe.Exec(ctx)
	switch err := renewed.Err(); {
	case err == nil && renewed.Val():
		// On Redis Cluster each lease carries its own expiry: the deadline moves only
		// when every lease got its renewal answered.
		// And the permits of the limit keys its handlers hold, which live as the session.
		if s.e.renewLeases(ctx, in) && s.e.limits.renew(ctx, s.rdb) {
			in.extend(sent)
		}
		s.e.health.clear(healthRedis)
		if reg != nil && reg.Err() != nil {
			err := reg.Err()
			s.regAgo = registryBeats // written again at the next beat
			s.e.logs.warn("registry", "heartbeat: the instance registry write failed; the session itself was renewed", "err", translateRedisErr(err))
		}
	case err == nil:
		s.lose(in, "the session key is gone: Redis restarted or lost data, or this process stalled past the lease TTL")
	default:
		if in.ctx.Err() != nil {
			return
		}
		err = translateRedisErr(err)
		s.e.health.set(healthRedis, "heartbeat failing (Redis unreachable or too slow): "+err.Error())
		s.e.logs.warn("heartbeat", "heartbeat failed; the leases stay until the local deadline", "err", err)
	}
}

// reopen finishes the incarnation that is over and opens the next one.
func (s *session) reopen() {
	s.mu.Lock()
	old := s.cur
	s.mu.Unlock()
	s.e.waitWorkers(old)
	if s.e.stopping() {
		return
	}
	ctx, cancel := context.WithTimeout(s.e.hardCtx, s.e.cfg.Timing.LeaseTTL)
	defer cancel()
	if old != nil {
		// Give the old leases up now rather than at the key's expiry.
		if err := s.rdb.Del(ctx, s.e.keys.SessionKey(old.owner)).Err(); err != nil {
			s.e.health.set(healthRedis, "redis unreachable: "+translateRedisErr(err).Error())
			s.e.logs.warn("reopen", "cannot reach Redis to open a new session yet", "err", translateRedisErr(err))
			return
		}
	}
	if !s.callsAnswer(ctx) {
		return
	}
	if err := s.open(ctx); err != nil {
		s.e.health.set(healthRedis, "cannot open a session: "+err.Error())
		s.e.logs.warn("reopen", "cannot open a new session yet", "err", err)
		return
	}
	s.e.health.clear(healthRedis)
	s.e.kickDiscovery()
}

// callsAnswer reports whether the engine's own client reaches Redis, with a PING when its
// last calls failed: a session is opened only for an engine that can work its leases.
func (s *session) callsAnswer(ctx context.Context) bool {
	if d, _ := s.e.calls.failing(); d == 0 {
		return true
	}
	if err := s.e.rdb.Ping(ctx).Err(); err != nil {
		err = translateRedisErr(err)
		s.e.health.set(healthCalls, "the engine's own calls to Redis fail: "+err.Error())
		s.e.logs.warn("reopen:calls", "no new session while the engine's own calls to Redis fail", "err", err)
		return false
	}
	s.e.calls.answered()
	s.e.health.clear(healthCalls)
	return true
}

// abandon closes the session of a Start that failed, quietly: nothing is logged and the
// engine's health is left to the next Start.
func (s *session) abandon(ctx context.Context) {
	s.quiet.Store(true)
	s.close(ctx)
}

// close ends the session at shutdown: the leases were released by the workers.
func (s *session) close(ctx context.Context) {
	s.mu.Lock()
	in := s.cur
	s.mu.Unlock()
	if in == nil {
		return
	}
	pipe := s.rdb.Pipeline()
	pipe.Del(ctx, s.e.keys.SessionKey(in.owner))
	pipe.HDel(ctx, s.e.keys.InstancesKey(), s.e.regID)
	_, _ = pipe.Exec(ctx)
	in.end(context.Canceled, "shut down")
}
