--#prelude
-- drain.lua: the owner's one call per batch: acknowledge what it handled, then read what
-- comes next, all under the fence.
--
-- Read order: for each lane (primary, then backfill) the group's oldest pending entry
-- first (claimed with XAUTOCLAIM, which also takes it over from a previous owner's
-- consumer and counts the delivery), then a batch of new entries. A lane is only read
-- when the lanes before it are empty.
--
-- A delivery count is the number of times the entry reached a handler, the coming run
-- included: an entry is returned only to be started, and reads that never reached a
-- handler are given their count back: what the caller does not start (release.lua,
-- giveback.lua), a refused native read (ARGV[7]), a lost one (ARGV[8]), a previous
-- owner's read-ahead (ARGV[9]). An entry given back is pending under the consumer
-- __unstarted__ until it is claimed.
--
-- KEYS[1]  lease key
-- KEYS[2]  the caller's session key
-- KEYS[3]  halt record of the partition for this group (hash)
-- KEYS[4]  pause record of the unit for this group (hash, with an expiry when the pause
--          has an end)
-- KEYS[5..] lane streams, primary first
-- ARGV[1]  token "{owner}:{generation}"
-- ARGV[2]  consumer group
-- ARGV[3]  consumer name
-- ARGV[4]  batch size for new entries
-- ARGV[5]  expected head: "" for a normal read, or "{lane index}|{entry id}" of the entry
--          the caller retries (after a failure or after a halt was cleared)
-- ARGV[6]  Redis Cluster: the lease TTL in ms to give a dormant lease its expiry back
--          (see renew.lua) when entries are returned, so they can start without another
--          round trip; "0" otherwise
-- ARGV[7]  "" or an entry id L: the caller read the first lane's new entries itself,
--          natively, with an XREADGROUP that ran just before this script in the same
--          MULTI/EXEC transaction (Lua would convert every field of every entry twice);
--          L is the last entry the caller read before. The read runs whatever this
--          script would answer, so this script judges it: it may be used only when the
--          fence holds, no halt or pause record exists and, once the acknowledgements are applied,
--          every entry pending on the lane is the caller's and after L (so the read took
--          exactly the entries after everything already handled): then {2}. Otherwise
--          the read's entries (the caller's, after L, delivered once) get their delivery
--          count of 0 back, whatever else is answered, and wait to be claimed in order.
-- ARGV[8]  "" or an entry id: the caller's last read transaction may have taken entries
--          of the first lane after this id that it never started (the transaction's
--          reply was lost, or its script did not run): those still pending under the
--          caller's consumer with a delivery count of 1 get their count of 0 back first,
--          without the lease (they are the caller's own, and nobody claimed them since).
-- ARGV[9]  "" or n, on the new owner's first call after it took the lease: of each other
--          consumer's pending entries (a previous owner's), only the first n that
--          reached a handler (count 1 or more) may have run: that owner starts a run
--          only while fewer than its max_unacked handled events lack an acknowledgement,
--          and a run carries up to batch_max events (n is max_unacked - 1 + batch_max,
--          both taken to be the caller's). The others are its read-ahead, which
--          never reached a handler (it crashed, or lost its lease before it could give
--          them back): each gets its delivery count lowered by one, under the consumer
--          __unstarted__, where nothing is corrected twice.
-- ARGV[10..] acknowledgements: for each lane in KEYS order, a count n then n entry ids
-- Returns:
--   {-1}                                fenced: lease or session not the caller's
--   {-2}                                halted: a halt record exists (acks were applied)
--   {-3, ms}                            paused: a pause record exists (acks were applied);
--                                       ms is its time to live, -1 when it has no end
--   {0, lastid1, lastid2, ...}          nothing to read; each lane's last entry id
--   {1, lane, deliveries, entries, all, fresh}
--                                       entries of one lane (lane is 1-based); for a
--                                       pending head, deliveries is its delivery count;
--                                       all is 1 when the entries are everything the unit
--                                       held to read: new entries of the first lane, fewer
--                                       than a batch, and no other lane exists (the caller
--                                       may go idle once they are handled, without reading
--                                       again), else 0; fresh is 1 on a first call after
--                                       the lease was taken (ARGV[9]) when no lane had a
--                                       consumer group before it (no previous owner left
--                                       consumers to drop), else 0
--   {3}                                 the expected head is no longer pending (an
--                                       operator skipped or moved it): carry on
--   {2}                                 (ARGV[7] set) the transaction's read stands: its
--                                       entries are the ones that come next, in order;
--                                       with any other reply the caller must not use it
local group, consumer = ARGV[2], ARGV[3]
local nlanes = #KEYS - 4
local first = KEYS[5]

-- give_back gives the entries of the first lane after id that are pending under the
-- caller with a delivery count of 1 (read, never started) their count of 0 back, under
-- the consumer __unstarted__.
local function give_back(id)
  local p = redis.pcall('XPENDING', first, group, after(id), '+', ARGV[4], consumer)
  if type(p) ~= 'table' or p.err then return end
  -- XCLAIM stream group __unstarted__ 0 id... RETRYCOUNT 0 JUSTID (ids must come last in
  -- a Lua call's argument list to all be passed, so the command is built whole)
  local cmd = {'XCLAIM', first, group, '__unstarted__', 0}
  for _, e in ipairs(p) do
    if tonumber(e[4]) == 1 then cmd[#cmd + 1] = e[1] end
  end
  if #cmd > 5 then
    cmd[#cmd + 1], cmd[#cmd + 2], cmd[#cmd + 3] = 'RETRYCOUNT', 0, 'JUSTID'
    redis.call(unpack(cmd))
  end
end

local native = ARGV[7] ~= ''
if ARGV[8] ~= '' then
  give_back(ARGV[8])
end
-- The fence in one call: the lease and the liveness key (the session; on Redis Cluster
-- the lease itself).
local fence = redis.call('MGET', KEYS[1], KEYS[2])
if fence[1] ~= ARGV[1] or not fence[2] then
  if native then give_back(ARGV[7]) end
  return {-1}
end
local nogroup = {} -- lanes found without the group (or without a stream) by the takeover
local fresh = 0
if ARGV[9] ~= '' then
  local keep = tonumber(ARGV[9])
  fresh = 1
  for lane = 1, nlanes do
    local stream = KEYS[4 + lane]
    -- An error: no stream, or no group yet (a partition new to the group).
    local cs = redis.pcall('XINFO', 'CONSUMERS', stream, group)
    if type(cs) ~= 'table' or cs.err then
      nogroup[lane] = true
    else
      fresh = 0
    end
    if type(cs) == 'table' and not cs.err then
      for _, c in ipairs(cs) do
        local info = {}
        for j = 1, #c, 2 do info[c[j]] = c[j + 1] end
        local name, n = info['name'], tonumber(info['pending'])
        if name ~= consumer and name ~= '__unstarted__' and n > keep then
          local kept = 0
          for _, e in ipairs(redis.call('XPENDING', stream, group, '-', '+', n, name)) do
            local count = tonumber(e[4])
            if count >= 1 then
              if kept < keep then
                kept = kept + 1
              else
                redis.call('XCLAIM', stream, group, '__unstarted__', 0, e[1], 'RETRYCOUNT', count - 1, 'JUSTID')
              end
            end
          end
        end
      end
    end
  end
end
local a = 10
for lane = 1, nlanes do
  local n = tonumber(ARGV[a])
  if n > 0 then
    redis.call('XACK', KEYS[4 + lane], group, unpack(ARGV, a + 1, a + n))
  end
  a = a + n + 1
end
-- The halt and pause records and the lanes after the first (backfill lanes, mostly never
-- written) in one call: none of them exists, in the common case; which ones do, only when
-- one does.
local missing = {} -- lanes whose stream does not exist
local probe = {KEYS[3], KEYS[4]}
for lane = 2, nlanes do probe[#probe + 1] = KEYS[4 + lane] end
if redis.call('EXISTS', unpack(probe)) == 0 then
  for lane = 2, nlanes do missing[lane] = true end
elseif redis.call('EXISTS', KEYS[3], KEYS[4]) > 0 then
  if redis.call('EXISTS', KEYS[3]) == 1 then
    if native then give_back(ARGV[7]) end
    return {-2}
  end
  local paused = redis.call('PTTL', KEYS[4])
  if paused ~= -2 then
    if native then give_back(ARGV[7]) end
    return {-3, paused}
  end
end
if native then
  -- XPENDING summary: {count, lowest id, highest id, {{consumer, count}, ...}}
  local s = redis.call('XPENDING', first, group)
  if tonumber(s[1]) > 0 then
    if #s[4] == 1 and s[4][1][1] == consumer and less(ARGV[7], s[2]) then
      return {2}
    end
    give_back(ARGV[7])
  end
  -- Refused (or the read found nothing): read as without it, oldest pending entry first.
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
  local stream = KEYS[4 + lane]
  if pending_count(stream, id) == 0 then
    return {3}
  end
  local c = redis.call('XCLAIM', stream, group, consumer, 0, id)
  if c[1] then
    return entries({1, lane, pending_count(stream, id), c, 0})
  end
  return {3}
end

-- claim_head takes over the group's oldest pending entry of a lane. The group is created
-- lazily, at 0, the first time the lane's stream exists: a lane that appears after the
-- lease was taken (a backfill lane, another category of a process manager) joins the unit.
-- Returns the XAUTOCLAIM reply, or nil when the stream does not exist.
local function claim_head(lane, stream)
  -- A lane after the first (a backfill lane, mostly never written) is skipped when the
  -- probe above found it missing, else with a cheap EXISTS when it does not exist; the
  -- first lane nearly always exists, and its claim tells that it does not (NOGROUP)
  -- without a call before it.
  if lane > 1 and (missing[lane] or redis.call('EXISTS', stream) == 0) then
    return nil
  end
  if not nogroup[lane] then
    local r = redis.pcall('XAUTOCLAIM', stream, group, consumer, 0, '0-0', 'COUNT', 1)
    if type(r) ~= 'table' or not r.err then
      return r
    end
    if string.sub(r.err, 1, 7) ~= 'NOGROUP' then
      return redis.error_reply(r.err)
    end
  end
  -- No group yet: create it (it fails only when the stream does not exist). A group
  -- created now holds nothing pending.
  local c = redis.pcall('XGROUP', 'CREATE', stream, group, '0')
  if type(c) == 'table' and c.err then
    if redis.call('EXISTS', stream) == 0 then
      return nil
    end
    return redis.error_reply(c.err)
  end
  return {'0-0', {}, {}}
end

-- only reports whether no lane after the first exists (the caller's read then took
-- everything the unit held).
local function only()
  for lane = 2, nlanes do
    if not missing[lane] and redis.call('EXISTS', KEYS[4 + lane]) == 1 then return 0 end
  end
  return 1
end

for lane = 1, nlanes do
  local stream = KEYS[4 + lane]
  local r = claim_head(lane, stream)
  if not r then missing[lane] = true end
  if r then
    if r.err then return r end
    if r[2][1] then
      return entries({1, lane, pending_count(stream, r[2][1][1]), r[2], 0, fresh})
    end
    local n = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', ARGV[4], 'STREAMS', stream, '>')
    if n and n[1] and n[1][2][1] then
      local all = 0
      if lane == 1 and #n[1][2] < tonumber(ARGV[4]) then all = only() end
      return entries({1, lane, 1, n[1][2], all, fresh})
    end
  end
end
local out = {0}
for lane = 1, nlanes do
  local last = {}
  if not missing[lane] then
    last = redis.call('XREVRANGE', KEYS[4 + lane], '+', '-', 'COUNT', 1)
  end
  if last[1] then out[#out + 1] = last[1][1] else out[#out + 1] = '0-0' end
end
return out
