-- unindex.lua: remove a reaped partition's key from its category's index on Redis
-- Cluster, only if the index still holds the entry id the reaper read before it reaped.
--
-- On Redis Cluster the index is a hash in a slot of its own (partition key -> the entry id
-- of the publish that indexed it), so a reap cannot remove the key in the script that
-- deletes the stream. A publish that re-created the stream after the reap writes its own
-- entry id (see publish.lua): the compare then fails and the key stays. See the protocol
-- in docs/concepts.md.
--
-- KEYS[1]  partition index of the category (hash)
-- ARGV[1]  partition key
-- ARGV[2]  the value the reaper read before reaping
-- Returns: 1 removed, 0 kept (the value changed: a publish re-indexed the key)
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  return redis.call('HDEL', KEYS[1], ARGV[1])
end
return 0
