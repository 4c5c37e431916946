package admin_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqctl/seqctl/pkg/admin"
	"github.com/seqctl/seqctl/pkg/engine"
)

func TestParseStream(t *testing.T) {
	adm := admin.New(nil, admin.Options{})
	for _, tt := range []struct {
		in, want, err string
	}{
		{"order:client-123", "order:client-123", ""},
		{"order:client-123:backfill", "order:client-123", ""},
		{"order:client-123:dlq", "order:client-123", ""},
		{"order", "order", ""},
		{"order:__partitions__", "", "reserved __name__"},
		{"order:a:b", "", "want {category}:{key}"},
		{":x", "", "category is empty"},
	} {
		p, err := adm.ParseStream(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParseStream(%q) err = %v, want %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || p.Stream() != tt.want {
			t.Errorf("ParseStream(%q) = %q, %v; want %q", tt.in, p.Stream(), err, tt.want)
		}
	}
}

func TestRedisUnavailable(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer rdb.Close()
	_, err := admin.New(rdb, admin.Options{}).ListPartitions(context.Background(), admin.Filter{})
	if !errors.Is(err, engine.ErrRedisUnavailable) {
		t.Errorf("err = %v, want ErrRedisUnavailable", err)
	}
}
