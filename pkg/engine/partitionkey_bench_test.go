package engine

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkExtractKey: reading the partition key from a payload, in place (ExtractKey)
// and by decoding the whole payload into a map (extractKeyByDecode, what ExtractKey did
// before), for the engine benchmarks' two-field payload and for an order of 20 lines.
//
//	go test -run '^$' -bench 'BenchmarkExtractKey' -benchmem ./pkg/engine/
func BenchmarkExtractKey(b *testing.B) {
	var lines []string
	for i := range 20 {
		lines = append(lines, fmt.Sprintf(`{"sku":"SKU-%05d","qty":%d,"price":{"amount":"%d.99","currency":"EUR"},"note":"gift wrap \"blue\""}`, i, i%3+1, 10+i))
	}
	order := fmt.Appendf(nil, `{"order_id":"o-12345","placed_at":"2026-12-06T10:00:00Z","lines":[%s],"shipping":{"city":"Lyon","zip":"69001"},"client_id":"client-42"}`, strings.Join(lines, ","))
	for _, p := range []struct {
		name    string
		payload []byte
	}{{"small", benchPayload(42, 7)}, {fmt.Sprintf("order%dB", len(order)), order}} {
		for _, f := range []struct {
			name string
			fn   func([]byte, string, string) (string, error)
		}{{"scan", ExtractKey}, {"decode", extractKeyByDecode}} {
			b.Run(p.name+"/"+f.name, func(b *testing.B) {
				b.SetBytes(int64(len(p.payload)))
				for b.Loop() {
					if k, err := f.fn(p.payload, "client_id", ""); err != nil || k != "client-42" {
						b.Fatalf("key %q, %v", k, err)
					}
				}
			})
		}
	}
}
