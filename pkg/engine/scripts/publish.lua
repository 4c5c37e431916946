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
-- On Redis Cluster the index and the control stream are in other slots: the script then
-- only reports whether the partition's indexed mark is missing, and the publisher writes
-- the index (and announces the partition) after the append, then sets the mark (see
-- Keys.IndexedMarkKey and the protocol in docs/concepts.md). A duplicate reports it only
-- while the entry appended before is still in the stream: once that entry is gone, the
-- partition was reaped (or trimmed past it) and the duplicate has nothing to index; an
-- index write then would race with the reaper's compare and could remove the key for
-- good.
--
-- KEYS[1]  target stream (category, partition lane)
-- KEYS[2]  discovery index of the category (set), written with flag "i"; else KEYS[1]
-- KEYS[3]  control stream, written with flag "i"; else KEYS[1]
-- KEYS[4]  dedupe mark of the stream (hash: seq, id), with flag "m"; else KEYS[1]
-- KEYS[5]  event mark of this event id on this stream (string: entry id, PX window), with
--          flag "e"; else KEYS[1]
-- KEYS[6]  doorbell channel of the target stream (sharded pub/sub channel, not a key)
-- KEYS[7]  indexed mark of the partition (string), read with flag "c"; else KEYS[1]
-- KEYS[8]  event mark of the event before this one on the stream in the same batch
--          (string), read with flag "p"; else KEYS[1]
-- ARGV[1]  partition key ("" when not partitioned)
-- ARGV[2]  category
-- ARGV[3]  dedupe sequence (integer as text; used with flag "m")
-- ARGV[4]  event mark window in milliseconds (used with flag "e")
-- ARGV[5]  flags: "i" index in this script (one node), "c" report the indexed mark
--          (cluster), "m" dedupe mark, "e" event mark, "p" append only after the event
--          before it (PublishMany: an event whose predecessor in the batch was refused is
--          not appended either, so that sending the refused one and those after it again
--          keeps publish order)
-- ARGV[6..] envelope field/value pairs (no published_at: the time of the publish is the
--          entry id's first part, Redis time in ms, which readers take when the field is
--          absent)
-- Returns:
--   {1, id, x}  appended as entry id
--   {0, id, x}  not appended: the mark is already at or past this sequence, or the event
--               id was appended within the window; id is the entry appended before
--   {-1}        not appended: the event before it in the batch (flag "p") was not
--   x is 1 when flag "c" is given, the indexed mark is missing and the entry (appended now,
--   or before for a duplicate) is in the stream (the publisher must write the index),
--   else 0
local flags = ARGV[5]
local function has(f) return string.find(flags, f, 1, true) ~= nil end
local x = 0
if has('c') and redis.call('EXISTS', KEYS[7]) == 0 then
  x = 1
end
-- duplicate answers for an event appended before as prev.
local function duplicate(prev)
  if x == 1 and (prev == '' or not redis.call('XRANGE', KEYS[1], prev, prev)[1]) then
    x = 0
  end
  return {0, prev, x}
end
if has('m') then
  local last = redis.call('HGET', KEYS[4], 'seq')
  if last and tonumber(last) >= tonumber(ARGV[3]) then
    return duplicate(redis.call('HGET', KEYS[4], 'id') or '')
  end
end
if has('e') then
  local prev = redis.call('GET', KEYS[5])
  if prev then
    return duplicate(prev)
  end
end
if has('p') and not redis.call('GET', KEYS[8]) then
  return {-1}
end
local id = redis.call('XADD', KEYS[1], '*', unpack(ARGV, 6))
if has('i') then
  if redis.call('SADD', KEYS[2], ARGV[1]) == 1 then
    redis.call('XADD', KEYS[3], 'MAXLEN', '~', '1000', '*', 'op', 'partition', 'category', ARGV[2], 'key', ARGV[1])
  end
end
if has('m') then
  redis.call('HSET', KEYS[4], 'seq', ARGV[3], 'id', id)
end
if has('e') then
  redis.call('SET', KEYS[5], id, 'PX', ARGV[4])
end
redis.call('SPUBLISH', KEYS[6], id)
return {1, id, x}
