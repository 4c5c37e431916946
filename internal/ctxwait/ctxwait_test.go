package ctxwait

import (
	"context"
	"testing"
	"time"
)

// Sleep waits, and returns early when the context ends.
func TestSleep(t *testing.T) {
	start := time.Now()
	if ok := Sleep(context.Background(), 20*time.Millisecond); !ok || time.Since(start) < 20*time.Millisecond {
		t.Errorf("Sleep = %v after %s, want true after 20ms", ok, time.Since(start))
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(10*time.Millisecond, cancel)
	start = time.Now()
	if ok := Sleep(ctx, time.Hour); ok || time.Since(start) > 10*time.Second {
		t.Errorf("Sleep on a cancelled context = %v after %s", ok, time.Since(start))
	}
}
