#!lua flags=allow-cross-slot-keys
-- renew.lua: renew, on Redis Cluster, the leases an instance holds on one node, in one
-- call per node and heartbeat, however many partitions it owns there.
--
-- On a single node one session key carries every lease; on Redis Cluster no script can
-- read a key in another slot, so each lease carries its own PX expiry (see acquire.lua).
-- This script runs on the node serving KEYS[1] and renews the other leases of the node as
-- well: Redis lets a script flagged allow-cross-slot-keys touch keys of several slots of
-- the node it runs on. A lease whose slot is not served here (a slot moved meanwhile) is
-- reported, and the caller renews it on its own with KEYS[1] set to it.
--
-- The same call makes an idle partition's lease dormant (ARGV[1] "0": PERSIST, the lease
-- then lives while its owner's session does, see acquire.lua) and re-arms a dormant lease
-- before its owner starts an event again (ARGV[1] the TTL).
--
-- KEYS[1]  one lease key of the node (it decides where the call runs)
-- ARGV[1]  lease TTL in ms, or "0" to remove the expiry (dormant lease)
-- ARGV[2..] pairs: lease (or guard) key, token "{owner}:{generation}" it must hold
-- Returns: one integer per pair: 1 renewed (or made dormant), 0 lost (the key no longer holds the token;
--          nothing changed), -1 not served by this node (nothing changed)
local out = {}
for i = 2, #ARGV, 2 do
  local ok, cur = pcall(redis.call, 'GET', ARGV[i])
  if not ok then
    out[#out + 1] = -1
  elseif cur == ARGV[i + 1] then
    if ARGV[1] == '0' then
      redis.call('PERSIST', ARGV[i])
    else
      redis.call('PEXPIRE', ARGV[i], ARGV[1])
    end
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
