-- acquire.lua: take the ownership lease of one unit for one consumer group.
--
-- A lease is free when the key is missing or its owner's session key has expired (the
-- owner died or stalled past the TTL). Taking it increments the group's generation
-- counter, so every change of hands gets a strictly larger fencing token. The counter
-- is never below the Redis server time in microseconds: after Redis lost the counter
-- (a restart without persistence, a failover to a replica that had not received it) the
-- next generation is still above every one handed out before, as long as the server
-- clock did not go back by more than the time since that grant.
--
-- KEYS[1]  lease key (string "{owner}:{generation}")
-- KEYS[2]  generation counter of the group (string, INCR)
-- KEYS[3]  the caller's session key (string; must exist)
-- ARGV[1]  owner (the caller's session owner id)
-- ARGV[2]  session key prefix (to check the current owner's liveness)
--
-- Consumer groups are created by drain.lua when the owner first reads a lane.
-- Returns:
--   {1, generation}      acquired
--   {2, generation}      already held by the caller (re-adopted at the same generation)
--   {0, "owner:gen"}     held by a live owner
--   {-3}                 the caller's own session is gone (it must start a new one)
if redis.call('EXISTS', KEYS[3]) == 0 then
  return {-3}
end
local cur = redis.call('GET', KEYS[1])
if cur then
  local owner, g = string.match(cur, '^(.*):(%d+)$')
  if owner == ARGV[1] then
    return {2, tonumber(g)}
  end
  if owner and redis.call('EXISTS', ARGV[2] .. owner) == 1 then
    return {0, cur}
  end
end
local t = redis.call('TIME')
local floor = tonumber(t[1]) * 1000000 + tonumber(t[2])
local gen = redis.call('INCR', KEYS[2])
if gen < floor then
  gen = floor
  redis.call('SET', KEYS[2], string.format('%d', gen))
end
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. string.format('%d', gen))
return {1, gen}
