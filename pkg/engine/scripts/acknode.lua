#!lua flags=allow-cross-slot-keys
-- acknode.lua: acknowledge, on Redis Cluster, handled entries of many partition lanes
-- whose slots one node serves, in one call per node and flush, each lane fenced by its
-- own lease. ackmany.lua needs every key in one slot, which on a cluster means one call
-- per partition; Redis lets a script flagged allow-cross-slot-keys touch keys of several
-- slots of the node it runs on. A lane whose slot is not served here (a slot moved
-- meanwhile) is reported, and the caller acknowledges it with ackmany.lua.
--
-- KEYS[1]  one lease key of the node (it decides where the call runs)
-- ARGV     for each lane: its lease key, the lane stream, token "{owner}:{generation}",
--          consumer group, n, then n entry ids
-- Returns: one integer per lane: the number of entries acknowledged, -1 when the lease is
--          not the caller's (nothing acknowledged there), -2 when the node does not serve
--          the lane's slot (nothing done there)
local out = {}
local a = 1
while a <= #ARGV do
  local lease, lane, token, group, n = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], tonumber(ARGV[a + 4])
  local ok, cur = pcall(redis.call, 'GET', lease)
  if not ok then
    out[#out + 1] = -2
  elseif cur ~= token then
    out[#out + 1] = -1
  else
    -- The lane shares the lease's slot, but a slot being migrated may have moved one key
    -- and not the other yet.
    local acked, r = pcall(redis.call, 'XACK', lane, group, unpack(ARGV, a + 5, a + 4 + n))
    if acked then out[#out + 1] = r else out[#out + 1] = -2 end
  end
  a = a + 5 + n
end
return out
