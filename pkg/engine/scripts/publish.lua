-- publish.lua: append an event to its stream and, for a partition stream, add the key to
-- the category's discovery index in the same step, so a reap can never strand an entry
-- outside the index. A newly indexed partition is announced on the control stream.
--
-- With a dedupe mark (the outbox relay), the event is appended only if its sequence is
-- above the last one recorded for the stream, and the mark is advanced in the same step:
-- a relay that crashed after the XADD but before marking its row never publishes twice.
--
-- KEYS[1]  target stream (category, partition lane)
-- KEYS[2]  discovery index of the category (set), or "" when not partitioned
-- KEYS[3]  control stream
-- KEYS[4]  dedupe mark of the stream (hash: seq, id), or "" for none
-- ARGV[1]  partition key ("" when not partitioned)
-- ARGV[2]  category
-- ARGV[3]  dedupe sequence (integer as text; ignored without KEYS[4])
-- ARGV[4..] envelope field/value pairs (published_at is added here, Redis TIME in ms)
-- Returns:
--   {1, id}   appended as entry id
--   {0, id}   not appended: the mark is already at or past this sequence; id is the
--             entry recorded with the mark
if KEYS[4] ~= '' then
  local last = redis.call('HGET', KEYS[4], 'seq')
  if last and tonumber(last) >= tonumber(ARGV[3]) then
    return {0, redis.call('HGET', KEYS[4], 'id') or ''}
  end
end
local t = redis.call('TIME')
local ms = tostring(t[1] * 1000 + math.floor(t[2] / 1000))
local id = redis.call('XADD', KEYS[1], '*', 'published_at', ms, unpack(ARGV, 4))
if KEYS[2] ~= '' then
  if redis.call('SADD', KEYS[2], ARGV[1]) == 1 then
    redis.call('XADD', KEYS[3], 'MAXLEN', '~', '1000', '*', 'op', 'partition', 'category', ARGV[2], 'key', ARGV[1])
  end
end
if KEYS[4] ~= '' then
  redis.call('HSET', KEYS[4], 'seq', ARGV[3], 'id', id)
end
return {1, id}
