-- publish.lua: append an event to its stream and, for a partition stream, add the key to
-- the category's discovery index in the same step, so a reap can never strand an entry
-- outside the index. A newly indexed partition is announced on the control stream.
--
-- KEYS[1]  target stream (category, partition lane)
-- KEYS[2]  discovery index of the category (set), or "" when not partitioned
-- KEYS[3]  control stream
-- ARGV[1]  partition key ("" when not partitioned)
-- ARGV[2]  category
-- ARGV[3..] envelope field/value pairs (published_at is added here, Redis TIME in ms)
-- Returns: the new entry id
local t = redis.call('TIME')
local ms = tostring(t[1] * 1000 + math.floor(t[2] / 1000))
local id = redis.call('XADD', KEYS[1], '*', 'published_at', ms, unpack(ARGV, 3))
if KEYS[2] ~= '' then
  if redis.call('SADD', KEYS[2], ARGV[1]) == 1 then
    redis.call('XADD', KEYS[3], 'MAXLEN', '~', '1000', '*', 'op', 'partition', 'category', ARGV[2], 'key', ARGV[1])
  end
end
return id
