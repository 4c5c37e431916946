-- release.lua: give a lease back (graceful shutdown or hand-over), fenced.
--
-- KEYS[1]  lease key
-- KEYS[2]  control stream (capped notice stream)
-- ARGV[1]  token "{owner}:{generation}" the caller holds
-- ARGV[2]  consumer group
-- ARGV[3]  unit name
-- Returns: 1 released, -1 fenced (not the caller's lease any more; nothing changed)
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return -1
end
redis.call('DEL', KEYS[1])
redis.call('XADD', KEYS[2], 'MAXLEN', '~', '1000', '*', 'op', 'released', 'group', ARGV[2], 'unit', ARGV[3])
return 1
