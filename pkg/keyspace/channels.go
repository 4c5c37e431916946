package keyspace

import (
	"strconv"
	"strings"
)

// BellChannel is the doorbell of one lane stream (sharded pub/sub channel, not a key):
// "{stream}:__bell__". Every script that appends to a lane SPUBLISHes the new entry id
// here in the same step, and the owner's doorbell SSUBSCRIBEs while the owner holds the
// lane, so an idle partition costs no Redis call until an entry arrives. The hash tag
// puts the channel in the slot of the stream itself, as Redis Cluster requires of
// sharded channels touched by a script.
func (k Keys) BellChannel(stream string) string { return k.tagged(stream) + bellSuffix }

// bellSuffix ends every bell channel.
const bellSuffix = ":__bell__"

// BellStreams returns the streams whose bell channel is channel: normally one (the
// layouts give distinct streams distinct channels), two at most when a stream is named
// both with and without a hash tag; none for another channel. It inverts BellChannel.
func (k Keys) BellStreams(channel string) []string {
	base, ok := strings.CutSuffix(channel, bellSuffix)
	if !ok {
		return nil
	}
	var out []string
	// tagged leaves a Redis Cluster stream that has a hash tag as it is, and wraps any
	// other stream in braces.
	if k.cluster && strings.Contains(base, "{") {
		out = append(out, base)
	}
	if inner, ok := strings.CutPrefix(base, "{"); ok {
		if inner, ok = strings.CutSuffix(inner, "}"); ok && !(k.cluster && strings.Contains(inner, "{")) {
			out = append(out, inner)
		}
	}
	return out
}

// KeyspaceChannel is the keyspace notification channel of a key in database db
// (pub/sub channel, not a key): "__keyspace@{db}__:{key}". With notify-keyspace-events
// holding K and t, Redis publishes each stream command's name on it ("xadd" for an
// append), whoever sent the command. On Redis Cluster it is published on the node that
// serves the key only, and its name hashes like the key (a cluster stream has the
// partition key as its hash tag).
func (k Keys) KeyspaceChannel(db int, key string) string {
	return keyspacePrefix + strconv.Itoa(db) + "__:" + key
}

const keyspacePrefix = "__keyspace@"

// KeyOfKeyspaceChannel returns the key of a keyspace channel, and whether channel is one.
// It inverts KeyspaceChannel.
func KeyOfKeyspaceChannel(channel string) (string, bool) {
	rest, ok := strings.CutPrefix(channel, keyspacePrefix)
	if !ok {
		return "", false
	}
	i := strings.Index(rest, "__:")
	if i < 0 {
		return "", false
	}
	return rest[i+3:], true
}
