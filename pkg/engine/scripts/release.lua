-- release.lua: give a lease back (graceful shutdown or hand-over), fenced.
--
-- Entries the owner read but never started are handed back with their delivery count
-- restored (XCLAIM ... RETRYCOUNT), under the consumer __unstarted__ (see drain.lua), so
-- the next owner counts its first attempt as 1: a graceful hand-over never costs an
-- event one of its retries.
--
-- KEYS[1]   lease key
-- KEYS[2]   control stream (capped notice stream); in cluster mode, where it is in
--           another slot, the lease key again, unread (the caller announces the release)
-- KEYS[3..] lane streams of the unit, then its g guard lease keys (see acquire.lua)
-- ARGV[1]   token "{owner}:{generation}" the caller holds
-- ARGV[2]   consumer group
-- ARGV[3]   unit name
-- ARGV[4]   the caller's consumer name
-- ARGV[5]   g, the number of guard lease keys at the end of KEYS
-- ARGV[6]   "1" to announce the release on KEYS[2], "0" not to
-- ARGV[7..] unstarted entries as triples: lane index (1-based), entry id, delivery count
-- Returns: 1 released, -1 fenced (not the caller's lease any more; nothing changed)
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return -1
end
for i = 7, #ARGV, 3 do
  local lane = KEYS[2 + tonumber(ARGV[i])]
  redis.pcall('XCLAIM', lane, ARGV[2], '__unstarted__', 0, ARGV[i + 1], 'RETRYCOUNT', ARGV[i + 2], 'JUSTID')
end
for i = #KEYS - tonumber(ARGV[5]) + 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[1] then redis.call('DEL', KEYS[i]) end
end
redis.call('DEL', KEYS[1])
if ARGV[6] == '1' then
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', '1000', '*', 'op', 'released', 'group', ARGV[2], 'unit', ARGV[3])
end
return 1
