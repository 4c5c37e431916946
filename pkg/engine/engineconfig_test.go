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
