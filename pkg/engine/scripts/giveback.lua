-- giveback.lua: give the entries an owner read but never started their delivery count
-- back, when it stops without releasing its lease (the lease was lost or taken, its
-- session ended, the engine stopped hard): the next owner then counts their first run as
-- attempt 1, as after a graceful release (release.lua).
--
-- It needs no lease: it touches only entries still pending under the caller's own
-- consumer with the delivery count its read gave them, which no one has claimed since,
-- so no one ran them since, and it cannot change what is delivered or in what order. An
-- entry someone else claimed meanwhile keeps its count. Given back, an entry is pending
-- under the consumer __unstarted__ (see drain.lua).
--
-- KEYS[1..]  lane streams of the unit
-- ARGV[1]    consumer group
-- ARGV[2]    the caller's consumer name
-- ARGV[3..]  unstarted entries as triples: lane index (1-based), entry id, the delivery
--            count the caller's read gave it
-- Returns: the number of entries given back
local group, me = ARGV[1], ARGV[2]
local n = 0
for i = 3, #ARGV, 3 do
  local lane, id, count = KEYS[tonumber(ARGV[i])], ARGV[i + 1], tonumber(ARGV[i + 2])
  local p = redis.pcall('XPENDING', lane, group, id, id, 1, me)
  if type(p) == 'table' and p[1] and tonumber(p[1][4]) == count then
    redis.call('XCLAIM', lane, group, '__unstarted__', 0, id, 'RETRYCOUNT', count - 1, 'JUSTID')
    n = n + 1
  end
end
return n
