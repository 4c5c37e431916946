-- pause.lua: an operator pauses or resumes one unit for one group. No lease is needed:
-- the owner checks the pause record before each read (drain.lua) and, told by the
-- caller's notice, before each event it read ahead.
--
-- KEYS[1]  pause record (hash)
-- KEYS[2]  halt record of the unit for the group
-- KEYS[3]  lease key (to find the owner to tell)
-- ARGV[1]  "pause" | "resume"
-- ARGV[2]  pause: the duration in ms, "0" for a pause without an end
-- ARGV[3..] pause: the record's field/value pairs (reason, by); since_ms and until_ms are
--           set here from Redis TIME
-- Returns:
--   {1, lease, since_ms, until_ms}  paused (lease is the unit's lease value, "" when none)
--   {2, lease, since_ms, until_ms}  it was paused already: the record was replaced
--   {1, lease}                      resumed
--   {-5}                            pause: the unit is halted (resolve its head first)
--   {-6}                            resume: the unit is not paused
local lease = redis.call('GET', KEYS[3]) or ''
if ARGV[1] == 'resume' then
  if redis.call('DEL', KEYS[1]) == 0 then return {-6} end
  return {1, lease}
end
if redis.call('EXISTS', KEYS[2]) == 1 then return {-5} end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local px = tonumber(ARGV[2])
local untilms = 0
if px > 0 then untilms = now + px end
local code = 1
if redis.call('EXISTS', KEYS[1]) == 1 then code = 2 end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'since_ms', tostring(now), 'until_ms', tostring(untilms), unpack(ARGV, 3))
if px > 0 then redis.call('PEXPIRE', KEYS[1], px) end
return {code, lease, tostring(now), tostring(untilms)}
