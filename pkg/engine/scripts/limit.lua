-- limit.lua: take, renew or give back a permit of one value of a handler's limit key (a
-- tenant, say): at most a number of permits held at once (concurrency) and at most a
-- number of starts in any window of the rate (a sliding log of starts), counted across
-- every instance by Redis TIME. A permit has a slot (0 .. cap-1) and a generation, above
-- every generation given before for the value (floored at Redis time in microseconds, so
-- that a value whose key expired still gets higher ones): the fencing token a handler's
-- downstream may check per (value, slot). A permit expires unless renewed: a crashed
-- holder's slot comes back after the TTL.
--
-- KEYS[1]  permits of the value (hash: "s{i}" -> "{holder}|{generation}|{expiry ms}",
--          "gen" -> the last generation, "waited" -> when a take was last refused, ms)
-- KEYS[2]  starts of the value's current window (sorted set: generation, scored by it: the
--          Redis time of the start in microseconds, or just above)
-- ARGV[1]  "take" | "renew" | "give"
-- take:  ARGV[2] holder, ARGV[3] concurrency cap (0: none), ARGV[4] starts per window (0:
--        none), ARGV[5] window ms, ARGV[6] permit TTL ms
--        {1, slot, generation, expiry_ms}  taken (slot -1 without a concurrency cap: there
--                                          is nothing to hold, renew or give back)
--        {0, wait_ms, reason}              refused ("concurrency" or "rate"); wait_ms is
--                                          how long until a permit may be free: the
--                                          earliest expiry, or the window's first start
--                                          leaving the window
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
local free = -1
if cap > 0 then
  -- The live permits (a crashed holder's expired one is free again), whatever their slot
  -- (one above a cap that was lowered still counts), read in one call whatever the cap.
  local all = redis.call('HGETALL', KEYS[1])
  local used, live, earliest = {}, 0, nil
  for i = 1, #all, 2 do
    local idx = string.match(all[i], '^s(%d+)$')
    local exp = idx and tonumber(string.match(all[i + 1], '|(%d+)$'))
    if exp and exp > now then
      used[tonumber(idx)] = true
      live = live + 1
      if not earliest or exp < earliest then earliest = exp end
    end
  end
  if live >= cap then
    redis.call('HSET', KEYS[1], 'waited', now)
    return {0, earliest - now, 'concurrency'}
  end
  free = 0
  while used[free] do free = free + 1 end
end
local nowus = tonumber(t[1]) * 1000000 + tonumber(t[2])
if rate > 0 then
  -- A sliding log in microseconds: at most rate starts in any window.
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', string.format('%d', nowus - window * 1000))
  if redis.call('ZCARD', KEYS[2]) >= rate then
    local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
    redis.call('HSET', KEYS[1], 'waited', now)
    return {0, math.ceil((tonumber(first[2]) + window * 1000 - nowus) / 1000), 'rate'}
  end
end
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
  redis.call('ZADD', KEYS[2], g, g)
  redis.call('PEXPIRE', KEYS[2], window)
end
return {1, free, g, now + ttl}
