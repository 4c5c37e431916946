-- drain.lua: the owner's one call per batch: acknowledge what it handled, then read what
-- comes next, all under the fence.
--
-- Read order: for each lane (primary, then backfill) the group's oldest pending entry
-- first (claimed with XAUTOCLAIM, which also takes it over from a previous owner's
-- consumer and counts the delivery), then a batch of new entries. A lane is only read
-- when the lanes before it are empty.
--
-- KEYS[1]  lease key
-- KEYS[2]  the caller's session key
-- KEYS[3]  halt record of the partition for this group (hash)
-- KEYS[4..] lane streams, primary first
-- ARGV[1]  token "{owner}:{generation}"
-- ARGV[2]  consumer group
-- ARGV[3]  consumer name
-- ARGV[4]  batch size for new entries
-- ARGV[5]  expected head: "" for a normal read, or "{lane index}|{entry id}" of the entry
--          the caller retries (after a failure or after a halt was cleared)
-- ARGV[6]  Redis Cluster: the lease TTL in ms to give a dormant lease its expiry back
--          (see renew.lua) when entries are returned, so they can start without another
--          round trip; "0" otherwise
-- ARGV[7]  "1": the caller reads the first lane's new entries itself, natively, with an
--          XREADGROUP that follows this script in the same MULTI/EXEC transaction (Lua
--          would convert every field of every entry twice); where this script would read
--          them it returns {2} instead. "" otherwise
-- ARGV[8..] acknowledgements: for each lane in KEYS order, a count n then n entry ids
-- Returns:
--   {-1}                                fenced: lease or session not the caller's
--   {-2}                                halted: a halt record exists (acks were applied)
--   {0, lastid1, lastid2, ...}          nothing to read; each lane's last entry id
--   {1, lane, deliveries, entries}      entries of one lane (lane is 1-based); for a
--                                       pending head, deliveries is its delivery count
--   {3}                                 the expected head is no longer pending (an
--                                       operator skipped or moved it): carry on
--   {2}                                 (ARGV[7] = "1") the first lane has no pending
--                                       entry, so the transaction's own read that follows
--                                       returns the entries that come next, in order; with
--                                       any other reply the caller must not use that read
--                                       (its entries stay pending and are claimed in order
--                                       by later calls)
if redis.call('GET', KEYS[1]) ~= ARGV[1] or redis.call('EXISTS', KEYS[2]) == 0 then
  return {-1}
end
local group, consumer = ARGV[2], ARGV[3]
local nlanes = #KEYS - 3
local a = 8
for lane = 1, nlanes do
  local n = tonumber(ARGV[a])
  if n > 0 then
    redis.call('XACK', KEYS[3 + lane], group, unpack(ARGV, a + 1, a + n))
  end
  a = a + n + 1
end
if redis.call('EXISTS', KEYS[3]) == 1 then
  return {-2}
end

-- entries returns a reply that carries entries, re-arming a dormant lease first.
local function entries(reply)
  if ARGV[6] ~= '0' then
    redis.call('PEXPIRE', KEYS[1], ARGV[6])
  end
  return reply
end

local function pending_count(stream, id)
  local p = redis.call('XPENDING', stream, group, id, id, 1)
  if p[1] then return p[1][4] end
  return 0
end

if ARGV[5] ~= '' then
  local sep = string.find(ARGV[5], '|', 1, true)
  local lane = tonumber(string.sub(ARGV[5], 1, sep - 1))
  local id = string.sub(ARGV[5], sep + 1)
  local stream = KEYS[3 + lane]
  if pending_count(stream, id) == 0 then
    return {3}
  end
  local c = redis.call('XCLAIM', stream, group, consumer, 0, id)
  if c[1] then
    return entries({1, lane, pending_count(stream, id), c})
  end
  return {3}
end

-- claim_head takes over the group's oldest pending entry of a lane. The group is created
-- lazily, at 0, the first time the lane's stream exists: a lane that appears after the
-- lease was taken (a backfill lane, another category of a process manager) joins the unit.
-- Returns the XAUTOCLAIM reply, or nil when the stream does not exist.
local function claim_head(stream)
  -- A lane that does not exist (a backfill lane never written) is skipped with a cheap
  -- EXISTS rather than through the error of a read on a missing group.
  if redis.call('EXISTS', stream) == 0 then
    return nil
  end
  local r = redis.pcall('XAUTOCLAIM', stream, group, consumer, 0, '0-0', 'COUNT', 1)
  if type(r) == 'table' and r.err then
    if string.sub(r.err, 1, 7) ~= 'NOGROUP' then
      return redis.error_reply(r.err)
    end
    redis.call('XGROUP', 'CREATE', stream, group, '0')
    r = redis.call('XAUTOCLAIM', stream, group, consumer, 0, '0-0', 'COUNT', 1)
  end
  return r
end

local missing = {} -- lanes whose stream does not exist (a backfill lane never written)
for lane = 1, nlanes do
  local stream = KEYS[3 + lane]
  local r = claim_head(stream)
  if not r then missing[lane] = true end
  if r then
    if r.err then return r end
    if r[2][1] then
      return entries({1, lane, pending_count(stream, r[2][1][1]), r[2]})
    end
    if lane == 1 and ARGV[7] == '1' then
      return {2}
    end
    local n = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', ARGV[4], 'STREAMS', stream, '>')
    if n and n[1] and n[1][2][1] then
      return entries({1, lane, 1, n[1][2]})
    end
  end
end
local out = {0}
for lane = 1, nlanes do
  local last = {}
  if not missing[lane] then
    last = redis.call('XREVRANGE', KEYS[3 + lane], '+', '-', 'COUNT', 1)
  end
  if last[1] then out[#out + 1] = last[1][1] else out[#out + 1] = '0-0' end
end
return out
