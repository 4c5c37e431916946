--#prelude
-- sweep.lua: find, among idle lanes an instance owns, those with an entry after the last
-- one their owner saw (an entry appended by a plain XADD of another publisher, which
-- rings no doorbell), while Redis sends no keyspace notifications for streams. One call
-- per batch of lanes (per master on Redis Cluster, whose variant of this script carries
-- the allow-cross-slot-keys flag); it only reads, and a lane with nothing new costs one
-- empty XRANGE.
--
-- KEYS[1]   the first lane (routes the call to its node on Redis Cluster)
-- ARGV[1..] pairs: a lane stream, the last entry id its owner saw ("ms-seq")
-- Returns: the 1-based indexes (in pairs) of the lanes that hold a later entry
local out = {}
for i = 1, #ARGV, 2 do
  if redis.call('XRANGE', ARGV[i], after(ARGV[i + 1]), '+', 'COUNT', 1)[1] then
    out[#out + 1] = (i + 1) / 2
  end
end
return out
