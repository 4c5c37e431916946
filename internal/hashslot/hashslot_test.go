package hashslot

import "testing"

// The slots Redis gives (CLUSTER KEYSLOT) for a few keys, hash tags included.
func TestOf(t *testing.T) {
	for key, want := range map[string]int{
		"123456789":    12739, // the CRC-16/XMODEM check value 0x31C3, mod 16384
		"foo":          12182,
		"{user1000}.a": 3443,
		"user1000":     3443,
		"foo{}{bar}":   8363,
	} {
		if got := Of(key); got != want {
			t.Errorf("Of(%q) = %d, want %d", key, got, want)
		}
	}
}
