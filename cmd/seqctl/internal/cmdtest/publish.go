package cmdtest

import "testing"

// PublishOne publishes one OrderPlaced event with seqctl publish, failing the test when
// it fails.
func PublishOne(t *testing.T, config, url, data string) {
	t.Helper()
	if res := RunCLI(t, false, "publish", "--config", config, "--redis-url", url, "--event", "OrderPlaced", "--data", data); res.Code != 0 {
		t.Fatalf("publish: exit %d: %s", res.Code, res.Stderr)
	}
}
