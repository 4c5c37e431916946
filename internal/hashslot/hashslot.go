// Package hashslot computes the Redis Cluster hash slot of a key: CRC-16/XMODEM of the
// key, or of its hash tag, mod 16384. Redis computes the same on one node too, so a slot
// groups keys the same way wherever it is read.
package hashslot

import "strings"

// Count is the number of hash slots of a Redis Cluster.
const Count = 16384

// Of is the hash slot of key: CRC16 of the key, or of its hash tag (the part between the
// first '{' and the next '}', when not empty), mod Count.
func Of(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key)) % Count
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial 0), the one Redis Cluster uses.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
