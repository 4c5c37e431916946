-- publish.lua: append an event to its stream and, for a partition stream, add the key to
-- the category's discovery index in the same step, so a reap can never strand an entry
-- outside the index. A newly indexed partition is announced on the control stream.
--
-- With a dedupe mark (the outbox relay), the event is appended only if its sequence is
-- above the last one recorded for the stream, and the mark is advanced in the same step:
-- a relay that crashed after the XADD but before marking its row never publishes twice.
--
-- Without a dedupe mark (a direct publish), the event id is remembered for a window
-- instead: a second call with the same event id within the window (a client library
-- that resends the script after a lost reply, a caller that retries) appends nothing.
--
-- An appended entry rings the stream's doorbell: its id is SPUBLISHed on the stream's
-- sharded channel, which wakes the owner if it waits on the stream (nothing is sent for
-- an event that was not appended).
--
-- KEYS[1]  target stream (category, partition lane)
-- KEYS[2]  discovery index of the category (set), or "" when not partitioned
-- KEYS[3]  control stream
-- KEYS[4]  dedupe mark of the stream (hash: seq, id), or "" for none
-- KEYS[5]  event mark of this event id on this stream (string: entry id, PX window), or
--          "" for none
-- KEYS[6]  doorbell channel of the target stream (sharded pub/sub channel, not a key)
-- ARGV[1]  partition key ("" when not partitioned)
-- ARGV[2]  category
-- ARGV[3]  dedupe sequence (integer as text; ignored without KEYS[4])
-- ARGV[4]  event mark window in milliseconds (ignored without KEYS[5])
-- ARGV[5..] envelope field/value pairs (published_at is added here, Redis TIME in ms)
-- Returns:
--   {1, id}   appended as entry id
--   {0, id}   not appended: the mark is already at or past this sequence, or the event
--             id was appended within the window; id is the entry appended before
if KEYS[4] ~= '' then
  local last = redis.call('HGET', KEYS[4], 'seq')
  if last and tonumber(last) >= tonumber(ARGV[3]) then
    return {0, redis.call('HGET', KEYS[4], 'id') or ''}
  end
end
if KEYS[5] ~= '' then
  local prev = redis.call('GET', KEYS[5])
  if prev then
    return {0, prev}
  end
end
local t = redis.call('TIME')
local ms = tostring(t[1] * 1000 + math.floor(t[2] / 1000))
local id = redis.call('XADD', KEYS[1], '*', 'published_at', ms, unpack(ARGV, 5))
if KEYS[2] ~= '' then
  if redis.call('SADD', KEYS[2], ARGV[1]) == 1 then
    redis.call('XADD', KEYS[3], 'MAXLEN', '~', '1000', '*', 'op', 'partition', 'category', ARGV[2], 'key', ARGV[1])
  end
end
if KEYS[4] ~= '' then
  redis.call('HSET', KEYS[4], 'seq', ARGV[3], 'id', id)
end
if KEYS[5] ~= '' then
  redis.call('SET', KEYS[5], id, 'PX', ARGV[4])
end
redis.call('SPUBLISH', KEYS[6], id)
return {1, id}
