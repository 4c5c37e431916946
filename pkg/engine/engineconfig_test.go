package engine

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestEngineConfigValidateConcurrency(t *testing.T) {
	d := testDomain(t, func(context.Context, Event) error { return nil }, nil)
	for _, tt := range []struct {
		name     string
		instance int
		limits   map[string]int
		want     string
	}{
		{"negative instance cap", -1, nil, "MaxConcurrentHandlers must be 0"},
		{"negative handler limit", 0, map[string]int{"Projector": -2}, `HandlerLimits["Projector"] must be 0`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := EngineConfig{Domain: d, Client: redis.NewClient(&redis.Options{}), MaxConcurrentHandlers: tt.instance, HandlerLimits: tt.limits}
			defer c.Client.Close()
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestEngineConfigValidateReplicas(t *testing.T) {
	d := testDomain(t, func(context.Context, Event) error { return nil }, nil)
	for _, tt := range []struct {
		name string
		min  int
		to   time.Duration
		want string
	}{
		{"negative count", -1, 0, "MinReplicas must be 0"},
		{"negative timeout", 1, -time.Second, "must not be negative"},
		{"timeout at the lease TTL", 1, 15 * time.Second, "below the lease TTL"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := EngineConfig{Domain: d, Client: redis.NewClient(&redis.Options{}), MinReplicas: tt.min, ReplicaTimeout: tt.to}
			defer c.Client.Close()
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestEngineConfigDiscoveryInterval checks the discovery period's default: half the
// (defaulted) lease TTL, between 250 ms and 2 s; an explicit value is kept.
func TestEngineConfigDiscoveryInterval(t *testing.T) {
	d := testDomain(t, func(context.Context, Event) error { return nil }, nil)
	for _, tt := range []struct {
		name           string
		ttl, set, want time.Duration
	}{
		{"default TTL", 0, 0, 2 * time.Second},
		{"15s TTL", 15 * time.Second, 0, 2 * time.Second},
		{"3s TTL", 3 * time.Second, 0, 1500 * time.Millisecond},
		{"1s TTL", time.Second, 0, 500 * time.Millisecond},
		{"short TTL", 200 * time.Millisecond, 0, 250 * time.Millisecond},
		{"explicit", time.Second, 3 * time.Second, 3 * time.Second},
		{"explicit with the default TTL", 0, 100 * time.Millisecond, 100 * time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := EngineConfig{Domain: d, Client: redis.NewClient(&redis.Options{}), Timing: LeaseTiming{LeaseTTL: tt.ttl}, DiscoveryInterval: tt.set}
			defer c.Client.Close()
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			if c.DiscoveryInterval != tt.want {
				t.Errorf("DiscoveryInterval = %v with a lease TTL of %v and %v set, want %v", c.DiscoveryInterval, tt.ttl, tt.set, tt.want)
			}
		})
	}
}
