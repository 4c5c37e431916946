-- publishbatch.lua: publish.lua for many events in one call, on one Redis node: each event
-- is appended to its stream with the index written and a new partition announced in the
-- same step, its event id remembered for the window (an event sent again appends nothing)
-- and its stream's doorbell rung, exactly as publish.lua does with the flags "ie" (or "e"
-- for an unpartitioned category); one call instead of one per event saves Redis the cost
-- of a script call per event (PublishMany, seqctl publish --data @file). Redis Cluster,
-- where the events' keys are in different slots, uses publish.lua per event.
--
-- The events of one stream are appended in the call's order, and an event whose stream
-- had an event refused earlier in the call (an error of Redis, such as OOM, on one of its
-- commands; each event runs as in a call of its own) is not appended either: sending the refused event and those after it again keeps publish
-- order. An event whose predecessor on its stream was in an earlier call of the same batch
-- names that one's event mark (flag "p"): it is appended only when the mark exists (the
-- predecessor was appended, now or before).
--
-- KEYS[1]          control stream
-- KEYS[2 + 5(i-1) ..] for event i, five keys:
--                  its stream; the discovery index of its category (set; with flag "i",
--                  else the stream again); its event mark (string: entry id, PX window;
--                  with flag "e", else the stream again); its stream's doorbell channel
--                  (sharded pub/sub channel, not a key); the event mark of its
--                  predecessor on the stream in an earlier call (flag "p", else the
--                  stream again)
-- ARGV[1]          the event mark window in milliseconds
-- ARGV[2 ..]       for each event in turn: its flags ("i" index, "e" event mark, "p"
--                  predecessor's mark), its partition key, its category, n, then n
--                  envelope field/value items (the time of the publish is the entry id's)
-- Returns one reply per event, in order:
--   {1, id}         appended as entry id
--   {0, id}         not appended: the event id was appended within the window, as id
--   {-1}            not appended: an event before it on its stream was not
--   {-2, message}   Redis refused one of its commands (the message says why): not
--                   appended, unless the refused command came after its XADD (as with
--                   publish.lua, whose call then fails after the append)
local window = ARGV[1]
local out = {}
local refused = {} -- stream -> true once one of its events was not appended

-- publish appends event i (its keys from KEYS[k], its fields ARGV[first..last]), as
-- publish.lua does; an error of Redis (on any of its commands) is raised.
local function publish(k, flags, key, category, first, last)
  local stream = KEYS[k]
  local marked = string.find(flags, 'e', 1, true)
  local prev = marked and redis.call('GET', KEYS[k + 2])
  if prev then
    return {0, prev}
  end
  if refused[stream] or (string.find(flags, 'p', 1, true) and not redis.call('GET', KEYS[k + 4])) then
    return {-1}
  end
  local id = redis.call('XADD', stream, '*', unpack(ARGV, first, last))
  if string.find(flags, 'i', 1, true) and redis.call('SADD', KEYS[k + 1], key) == 1 then
    redis.call('XADD', KEYS[1], 'MAXLEN', '~', '1000', '*', 'op', 'partition', 'category', category, 'key', key)
  end
  if marked then
    redis.call('SET', KEYS[k + 2], id, 'PX', window)
  end
  redis.call('SPUBLISH', KEYS[k + 3], id)
  return {1, id}
end

local a = 2
for i = 1, (#KEYS - 1) / 5 do
  local k = 2 + (i - 1) * 5
  local first = a + 4
  local last = first + tonumber(ARGV[a + 3]) - 1
  -- Each event as if in a call of its own: an error refuses it (and the later events of
  -- its stream), never the others.
  local ok, r = pcall(publish, k, ARGV[a], ARGV[a + 1], ARGV[a + 2], first, last)
  if not ok then
    r = {-2, type(r) == 'table' and r.err or tostring(r)}
  end
  if r[1] < 0 then
    refused[KEYS[k]] = true
  end
  out[i] = r
  a = last + 1
end
return out
