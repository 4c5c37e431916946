-- limit.lua: take, renew or give back a permit of one value of a handler's limit key (a
-- tenant, say): at most a number of permits held at once (concurrency) and at most a
-- number of starts in any window of the rate (a sliding log of starts), counted across
-- every instance by Redis TIME. Instances refused a permit wait in one line per value, in
-- the permits hash, first come first served, so that no instance starves another's
-- partitions of the value. A permit has a slot (0 .. cap-1) and a generation, above
-- every generation given before for the value (floored at Redis time in microseconds, so
-- that a value whose key expired still gets higher ones): the fencing token a handler's
-- downstream may check per (value, slot). A permit expires unless renewed: a crashed
-- holder's slot comes back after the TTL.
--
-- KEYS[1]  permits of the value (hash: "s{i}" -> "{holder}|{generation}|{expiry ms}",
--          "gen" -> the last generation, "waited" -> when a take was last refused, ms,
--          "w:{waiter}" -> "{arrival us}|{last ask ms}" per instance waiting in line)
-- KEYS[2]  starts of the value's current window (sorted set: generation, scored by the
--          Redis time of the start in microseconds)
-- ARGV[1]  "take" | "renew" | "give"
-- take:  ARGV[2] holder, ARGV[3] concurrency cap (0: none), ARGV[4] starts per window (0:
--        none), ARGV[5] window ms, ARGV[6] permit TTL ms, ARGV[7] waiter (the asking
--        instance's line: "" for none), ARGV[8] how long a waiter that asks no more keeps
--        its place, ms
--        {1, slot, generation, expiry_ms}  taken (slot -1 without a concurrency cap: there
--                                          is nothing to hold, renew or give back); a
--                                          holder that asks again for the permit it holds
--                                          (a lost reply) gets it back, renewed
--        {0, wait_ms, reason}              refused ("concurrency", "rate", or "line":
--                                          instances that waited longer come first);
--                                          wait_ms is how long until a permit may be free:
--                                          the earliest expiry, the window's first start
--                                          leaving the window, or ARGV[8]
-- renew: ARGV[2] holder, ARGV[3] slot, ARGV[4] generation, ARGV[5] permit TTL ms
--        1 renewed, 0 lost (expired and taken by another, or Redis lost it)
-- give:  ARGV[2] holder, ARGV[3] slot, ARGV[4] generation, ARGV[5] how long a refusal
--        counts as someone waiting, ms
--        {given, waited}  given is 1 when the permit was still the holder's; waited is 1
--                         when a take was refused that recently (the caller announces the
--                         release to the instances that wait)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local op = ARGV[1]

if op == 'renew' or op == 'give' then
  local field = 's' .. ARGV[3]
  local prefix = ARGV[2] .. '|' .. ARGV[4] .. '|'
  local v = redis.call('HMGET', KEYS[1], field, 'waited')
  local mine = v[1] and string.sub(v[1], 1, #prefix) == prefix
  if op == 'renew' then
    if not mine then return 0 end
    redis.call('HSET', KEYS[1], field, prefix .. string.format('%d', now + tonumber(ARGV[5])))
    redis.call('PEXPIRE', KEYS[1], 4 * tonumber(ARGV[5]))
    return 1
  end
  local given = 0
  if mine then
    redis.call('HDEL', KEYS[1], field)
    given = 1
  end
  local waited = 0
  if v[2] and now - tonumber(v[2]) < tonumber(ARGV[5]) then waited = 1 end
  return {given, waited}
end

local cap, rate, window, ttl = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local waiter, stale = ARGV[7], tonumber(ARGV[8])
local nowus = tonumber(t[1]) * 1000000 + tonumber(t[2])
local all = redis.call('HGETALL', KEYS[1])
-- The live permits (a crashed holder's expired one is free again), whatever their slot
-- (one above a cap that was lowered still counts), and the instances waiting in line:
-- read in one call whatever the cap.
local used, live, earliest = {}, 0, nil
local mine, ahead, arrival = nil, 0, nil
local waiters = {}
local holderPrefix = ARGV[2] .. '|'
for i = 1, #all, 2 do
  local f, v = all[i], all[i + 1]
  local idx = string.match(f, '^s(%d+)$')
  if idx then
    local exp = tonumber(string.match(v, '|(%d+)$'))
    if exp and exp > now then
      used[tonumber(idx)] = true
      live = live + 1
      if not earliest or exp < earliest then earliest = exp end
      if string.sub(v, 1, #holderPrefix) == holderPrefix then mine = {tonumber(idx), v} end
    end
  elseif string.sub(f, 1, 2) == 'w:' then
    local arr, last = string.match(v, '^(%d+)|(%d+)$')
    if not arr or now - tonumber(last) > stale then
      redis.call('HDEL', KEYS[1], f)
    else
      waiters[#waiters + 1] = {string.sub(f, 3), tonumber(arr)}
    end
  end
end
if mine then
  -- The holder asks again for a permit it holds (its reply was lost): the same permit,
  -- renewed; no second slot, no second start.
  local gen = string.match(mine[2], '|(%d+)|%d+$')
  redis.call('HSET', KEYS[1], 's' .. mine[1], ARGV[2] .. '|' .. gen .. '|' .. string.format('%d', now + ttl))
  redis.call('PEXPIRE', KEYS[1], 4 * ttl + window)
  return {1, mine[1], gen, now + ttl}
end
-- The line across instances: each instance that was refused waits in it once (its
-- oldest waiting partition asks for it), first come first served; a take is granted only
-- when more permits are free than instances wait ahead of the asker.
for _, w in ipairs(waiters) do
  if w[1] == waiter then arrival = w[2] end
end
for _, w in ipairs(waiters) do
  if w[1] ~= waiter and (not arrival or w[2] < arrival or (w[2] == arrival and w[1] < waiter)) then
    ahead = ahead + 1
  end
end
local function refuse(wait, reason)
  redis.call('HSET', KEYS[1], 'waited', now)
  if waiter ~= '' then
    redis.call('HSET', KEYS[1], 'w:' .. waiter, string.format('%d|%d', arrival or nowus, now))
  end
  redis.call('PEXPIRE', KEYS[1], 4 * ttl + window)
  return {0, math.max(wait, 1), reason}
end
local free = -1
if cap > 0 then
  if live + ahead >= cap then
    if live >= cap then return refuse(earliest - now, 'concurrency') end
    return refuse(stale, 'line')
  end
  free = 0
  while used[free] do free = free + 1 end
end
if rate > 0 then
  -- A sliding log of starts, scored by Redis time in microseconds: at most rate starts
  -- in any window. A start scored after now (Redis time stepped back, a failover) counts
  -- as now, so it leaves the window one window later, never later than that.
  local future = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. string.format('%d', nowus), '+inf')
  for _, m in ipairs(future) do redis.call('ZADD', KEYS[2], nowus, m) end
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', string.format('%d', nowus - window * 1000))
  local n = redis.call('ZCARD', KEYS[2])
  if n + ahead >= rate then
    if n < rate then return refuse(stale, 'line') end
    local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
    return refuse(math.ceil((tonumber(first[2]) + window * 1000 - nowus) / 1000), 'rate')
  end
end
if waiter ~= '' and arrival then redis.call('HDEL', KEYS[1], 'w:' .. waiter) end
local gen = nowus
local before = tonumber(redis.call('HGET', KEYS[1], 'gen') or '0')
if before and before >= gen then gen = before + 1 end
local g = string.format('%d', gen)
if cap > 0 then
  redis.call('HSET', KEYS[1], 'gen', g, 's' .. free, ARGV[2] .. '|' .. g .. '|' .. string.format('%d', now + ttl))
else
  redis.call('HSET', KEYS[1], 'gen', g)
end
redis.call('PEXPIRE', KEYS[1], 4 * ttl + window)
if rate > 0 then
  redis.call('ZADD', KEYS[2], string.format('%d', nowus), g)
  redis.call('PEXPIRE', KEYS[2], window)
end
return {1, free, g, now + ttl}
