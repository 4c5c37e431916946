package redistest

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestTLSAndUsers(t *testing.T) {
	srv := StartWith(t, Options{TLS: true, Users: []string{"ACL SETUSER reader on >pw ~* +get"}})
	ctx := context.Background()
	if !strings.HasPrefix(srv.URL, "rediss://") {
		t.Fatalf("URL %q, want rediss://", srv.URL)
	}
	c := srv.Client(t)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("set through TLS with the client certificate: %v", err)
	}

	opt, _ := redis.ParseURL(srv.UserURL("reader", "pw"))
	opt.TLSConfig = srv.TLS.ClientConfig(t)
	r := redis.NewClient(opt)
	defer r.Close()
	if v, err := r.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("get as reader: %q, %v", v, err)
	}
	if err := r.Set(ctx, "k", "w", 0).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("set as reader: %v, want NOPERM", err)
	}

	// Without a client certificate the server refuses the connection.
	noCert := srv.TLS.ClientConfig(t)
	noCert.Certificates = nil
	opt, _ = redis.ParseURL(srv.URL)
	opt.TLSConfig, opt.MaxRetries = noCert, -1
	n := redis.NewClient(opt)
	defer n.Close()
	err := n.Ping(ctx).Err()
	if err == nil {
		t.Fatal("ping without a client certificate succeeded")
	}
	t.Logf("without a client certificate: %v", err)
}
