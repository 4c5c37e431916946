-- halt.lua: record that a partition's head failed max_retries attempts, fenced. The
-- record stops the owner (and any later owner) from advancing the partition until an
-- operator resolves the head. Nothing is moved to a DLQ: that would reorder the key.
--
-- The head's delivery count is set to its attempts, so that a retry (which clears the
-- record) runs it as the attempt after them: one more try, also for an event halted in
-- the middle of a batch, whose own count was that of the batch's one read.
--
-- KEYS[1]  lease key
-- KEYS[2]  the caller's session key
-- KEYS[3]  halt record (hash)
-- KEYS[4]  the lane stream the head is on
-- ARGV[1]  token "{owner}:{generation}"
-- ARGV[2]  consumer group
-- ARGV[3]  the caller's consumer (the head is pending under it)
-- ARGV[4]  the head's entry id
-- ARGV[5]  the head's attempts
-- ARGV[6..] field/value pairs: entry, lane, stream, attempts, error, owner, generation
-- Returns: 1 halted (since_ms set from Redis TIME), -1 fenced (nothing written)
if redis.call('GET', KEYS[1]) ~= ARGV[1] or redis.call('EXISTS', KEYS[2]) == 0 then
  return -1
end
redis.call('XCLAIM', KEYS[4], ARGV[2], ARGV[3], 0, ARGV[4], 'RETRYCOUNT', ARGV[5], 'JUSTID')
local t = redis.call('TIME')
redis.call('HSET', KEYS[3], 'since_ms', tostring(t[1] * 1000 + math.floor(t[2] / 1000)), unpack(ARGV, 6))
return 1
