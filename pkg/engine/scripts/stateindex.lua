-- stateindex.lua: add a unit to a category's index of halted or paused units, stamped
-- with Redis TIME. Writers call it before they write the halt or pause record (never
-- after), so a crash between the two leaves an index that over-reports, never one that
-- misses a record. The index is in a slot of its own: no partition key is touched here.
--
-- KEYS[1]  state index (sorted set: member -> ms of its last write)
-- ARGV[1]  member (keyspace.StateMember)
-- Returns: the stamp written, in ms
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZADD', KEYS[1], now, ARGV[1])
return now
