-- halt.lua: record that a partition's head failed max_retries attempts, fenced. The
-- record stops the owner (and any later owner) from advancing the partition until an
-- operator resolves the head. Nothing is moved to a DLQ: that would reorder the key.
--
-- KEYS[1]  lease key
-- KEYS[2]  the caller's session key
-- KEYS[3]  halt record (hash)
-- ARGV[1]  token "{owner}:{generation}"
-- ARGV[2..] field/value pairs: entry, lane, stream, attempts, error, owner, generation
-- Returns: 1 halted (since_ms set from Redis TIME), -1 fenced (nothing written)
if redis.call('GET', KEYS[1]) ~= ARGV[1] or redis.call('EXISTS', KEYS[2]) == 0 then
  return -1
end
local t = redis.call('TIME')
redis.call('HSET', KEYS[3], 'since_ms', tostring(t[1] * 1000 + math.floor(t[2] / 1000)), unpack(ARGV, 2))
return 1
