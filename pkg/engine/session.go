package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// session is the instance's liveness in Redis. Every lease the instance holds is valid
// only while its session key exists, so one PEXPIRE per heartbeat renews all of them,
// however many partitions are owned (an idle instance costs a call per heartbeat, not
// one per partition).
//
// If the session expires (the process stalled past the TTL, or Redis was unreachable for
// that long), every lease is void: the instance cancels its workers and opens a new
// session under a new owner name (instance id plus incarnation), so it can never confuse
// an old lease with a new one.
type session struct {
	e *Engine

	mu          sync.Mutex
	incarnation int                // guarded by mu
	owner       string             // instance id "." incarnation; guarded by mu
	ctx         context.Context    // cancelled when the session is lost; guarded by mu
	cancel      context.CancelFunc // guarded by mu

	// deadline is the local lease deadline, in nanoseconds on the monotonic clock since
	// e.start: the time the last successful renewal was sent, plus the TTL, minus a
	// safety margin. A worker starts an event only before it.
	deadline atomic.Int64
	epoch    time.Time
	started  time.Time
	host     string
}

func newSession(e *Engine) *session {
	host, _ := os.Hostname()
	return &session{e: e, epoch: time.Now(), host: host}
}

// margin is subtracted from the lease TTL for the local deadline: the time it may take
// the renewal to reach Redis plus clock-rate differences.
func (s *session) margin() time.Duration {
	ttl := s.e.cfg.Timing.LeaseTTL
	m := ttl / 5
	if m < 20*time.Millisecond {
		m = 20 * time.Millisecond
	}
	return m
}

func (s *session) setDeadline(sent time.Time) {
	d := int64(sent.Sub(s.epoch) + s.e.cfg.Timing.LeaseTTL - s.margin())
	for {
		cur := s.deadline.Load()
		if d <= cur || s.deadline.CompareAndSwap(cur, d) {
			return
		}
	}
}

// valid reports whether an event may be started now.
func (s *session) valid() bool { return int64(time.Since(s.epoch)) < s.deadline.Load() }

// current returns the owner name and the session context.
func (s *session) current() (string, context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.owner, s.ctx
}

// open creates a new incarnation of the session.
func (s *session) open(ctx context.Context) error {
	s.mu.Lock()
	s.incarnation++
	owner := fmt.Sprintf("%s.%d", s.e.cfg.InstanceID, s.incarnation)
	s.mu.Unlock()
	if s.started.IsZero() {
		s.started = time.Now()
	}
	if err := s.e.registerGroups(ctx); err != nil { // before the session: see registerGroups
		return err
	}
	sent := time.Now()
	pipe := s.e.rdb.TxPipeline()
	pipe.Set(ctx, SessionKey(owner), s.e.cfg.InstanceID, s.e.cfg.Timing.LeaseTTL)
	pipe.HSet(ctx, InstancesKey(), s.e.cfg.InstanceID, s.info(owner))
	if _, err := pipe.Exec(ctx); err != nil {
		return translateRedisErr(err)
	}
	sctx, cancel := context.WithCancel(s.e.hardCtx)
	s.mu.Lock()
	s.owner, s.ctx, s.cancel = owner, sctx, cancel
	s.mu.Unlock()
	s.deadline.Store(0)
	s.setDeadline(sent)
	return nil
}

// InstanceInfo is an engine instance's registry entry.
type InstanceInfo struct {
	ID          string `json:"id"`
	Owner       string `json:"owner"`
	Host        string `json:"host"`
	PID         int    `json:"pid"`
	StartedMS   int64  `json:"started_ms"`
	HeartbeatMS int64  `json:"heartbeat_ms"`
}

func (s *session) info(owner string) string {
	b, _ := json.Marshal(InstanceInfo{
		ID: s.e.cfg.InstanceID, Owner: owner, Host: s.host, PID: os.Getpid(),
		StartedMS: s.started.UnixMilli(), HeartbeatMS: time.Now().UnixMilli(),
	})
	return string(b)
}

// heartbeatLoop renews the session every HeartbeatInterval. It never waits on handlers.
func (s *session) heartbeatLoop() {
	defer s.e.bg.Done()
	t := time.NewTicker(s.e.cfg.Timing.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-s.e.hardCtx.Done():
			return
		case <-t.C:
		}
		s.beat()
	}
}

func (s *session) beat() {
	owner, _ := s.current()
	ttl := s.e.cfg.Timing.LeaseTTL
	ctx, cancel := context.WithTimeout(s.e.hardCtx, ttl/2)
	defer cancel()
	sent := time.Now()
	pipe := s.e.rdb.Pipeline()
	renewed := pipe.PExpire(ctx, SessionKey(owner), ttl)
	if !s.e.stopping() { // a stopping instance has left the registry already
		pipe.HSet(ctx, InstancesKey(), s.e.cfg.InstanceID, s.info(owner))
	}
	_, err := pipe.Exec(ctx)
	switch {
	case err == nil && renewed.Val():
		s.setDeadline(sent)
	case err == nil:
		s.e.log.Warn("session expired (the process stalled or Redis was unreachable past the lease TTL): dropping every lease", "owner", owner)
		s.lost(owner)
	default:
		if s.e.hardCtx.Err() != nil {
			return
		}
		s.e.log.Warn("heartbeat failed", "err", translateRedisErr(err))
		if !s.valid() {
			// Past the local deadline the leases may be taken: stop the handlers.
			s.lost(owner)
		}
	}
}

// lost voids the session owner had: cancels every worker, then opens a new incarnation
// (retried by the next heartbeat if Redis is unreachable).
func (s *session) lost(owner string) {
	s.mu.Lock()
	if s.owner != owner {
		s.mu.Unlock()
		return
	}
	cancel := s.cancel
	s.mu.Unlock()
	cancel()
	s.e.mu.Lock()
	workers := make([]*worker, 0, len(s.e.workers))
	for _, w := range s.e.workers {
		workers = append(workers, w)
	}
	s.e.mu.Unlock()
	for _, w := range workers {
		s.e.cfg.Observer.LeaseLost(w.sub.group, "session_expired")
		<-w.done
	}
	if s.e.stopping() {
		return
	}
	ctx, c := context.WithTimeout(s.e.hardCtx, s.e.cfg.Timing.LeaseTTL)
	defer c()
	if err := s.open(ctx); err != nil {
		s.e.log.Warn("cannot open a new session yet", "err", err)
		// Keep the old (cancelled) context; the next beat finds the key missing and
		// tries again.
		return
	}
	s.e.kickDiscovery()
}

// close deletes the session and the registry entry. Leases were released by the workers.
func (s *session) close(ctx context.Context) {
	owner, _ := s.current()
	pipe := s.e.rdb.Pipeline()
	pipe.Del(ctx, SessionKey(owner))
	pipe.HDel(ctx, InstancesKey(), s.e.cfg.InstanceID)
	_, _ = pipe.Exec(ctx)
	s.mu.Lock()
	if s.cancel != nil {
		s.cancel()
	}
	s.mu.Unlock()
}
