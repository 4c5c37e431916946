--#prelude
-- reap.lua: retire a cold partition (or process-manager unit), fenced: delete its lane
-- streams, remove its key from each category's discovery index, and drop the lease.
--
-- Only when, for every lane that exists: the last entry is older than the idle period by
-- Redis TIME; every consumer group registered for the lane's category exists on the
-- stream; and every group on the stream, registered or not, has been delivered the last
-- entry and has nothing pending. A group that is down or has never read the stream
-- therefore keeps the partition, and so does one on the stream that the registry as read
-- does not name (on Redis Cluster the caller reads the registry before this script: a
-- group that registered and read since is on the stream). A halted partition is never
-- reaped, nor is one paused for any of its registered groups: a handler's pause of the
-- lane's partition or a process manager's pause of the key as a correlation value,
-- whichever kind of unit the caller owns. On Redis Cluster the
-- unit's generation counter goes with it (generations stay above every one handed out
-- before: they are floored at Redis time, see acquire.lua).
-- On one node the reap is announced on the control stream (op=reaped, once per
-- category), so every instance drops the key from its view of the index; on Redis
-- Cluster the caller announces it once unindex.lua removed the key. A publish after the
-- reap re-creates the stream and re-adds the key to the index in one script, so it is
-- discovered again, never stranded.
--
-- KEYS[1]          lease key
-- KEYS[2]          the caller's session key
-- KEYS[3]          halt record
-- KEYS[4..3+n]     lane streams
-- KEYS[4+n..3+2n]  discovery index of each lane's category
-- KEYS[4+2n..3+3n] group registry of each lane's category
-- KEYS[4+3n]       generation counter of the unit on Redis Cluster; else the lease key
--                  again, unread (one node: one counter per group, shared)
-- KEYS[5+3n]       control stream on one node; on Redis Cluster, where it is in another
--                  slot, the lease key again, unread
-- KEYS[6+3n..5+3n+2r]  for each lane, for each group of its category's registry as the
--                  caller read it (r in all): the group's pause of the lane's partition,
--                  then its pause of the key as a process manager's correlation value
--                  (keyspace.PauseKey, PMPauseForm; both in the key's slot)
-- KEYS[6+3n+2r..]  guard lease keys of the unit (see acquire.lua), dropped with the lease
-- ARGV[1]  token "{owner}:{generation}"
-- ARGV[2]  idle period, ms
-- ARGV[3]  n, the number of lanes
-- ARGV[4]  the partition key (index member)
-- ARGV[5]  "cluster" on Redis Cluster, else ""
-- ARGV[6..5+n]  the category of each lane
-- ARGV[6+n..]  for each lane: m, then the m groups of its category's registry as the
--              caller read it (the pause keys above follow them). On one node the script
--              reads each registry too, and keeps the unit when it names a group the
--              caller did not read (its pause keys were not passed)
-- Returns:
--   {1}            reaped (the lease is gone: the caller stops owning the unit)
--   {0, ms}        not idle long enough: try again in ms
--   {-7, reason}   not reapable now (halted, pending entries, a group behind)
--   {-9, lane}     Redis Cluster: the partition's indexed mark is missing (a publisher
--                  stopped between its append and the index write): the caller indexes
--                  the partition itself and tries later
--   {-1}           fenced
if redis.call('GET', KEYS[1]) ~= ARGV[1] or redis.call('EXISTS', KEYS[2]) == 0 then
  return {-1}
end
if redis.call('EXISTS', KEYS[3]) == 1 then
  return {-7, 'halted'}
end
local idle = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local cluster = ARGV[5] == 'cluster'

-- registries[i] are the groups registered for lane i's category, as the caller read them;
-- pauses[i][name] the index in KEYS of the group's two pause keys.
local registries = read_registries(6 + n, n)
local pauses, k = {}, 6 + 3 * n
for i = 1, n do
  pauses[i] = {}
  for _, name in ipairs(registries[i]) do
    pauses[i][name] = k
    k = k + 2
  end
end
local guards = k
if not cluster then
  for i = 1, n do
    for _, name in ipairs(redis.call('SMEMBERS', KEYS[3 + 2 * n + i])) do
      if not pauses[i][name] then
        return {-7, 'group ' .. name .. ' registered meanwhile'}
      end
    end
  end
end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)

for i = 1, n do
  local lane = KEYS[3 + i]
  if redis.call('EXISTS', lane) == 1 then
    if cluster and redis.call('EXISTS', KEYS[3 + n + i]) == 0 then
      return {-9, lane}
    end
    local last = redis.call('XREVRANGE', lane, '+', '-', 'COUNT', 1)
    if last[1] then
      local ms = parse(last[1][1])
      if now - ms < idle then
        return {0, tostring(idle - (now - ms))}
      end
    end
    local groups = {}
    for _, g in ipairs(redis.call('XINFO', 'GROUPS', lane)) do
      local info = {}
      for j = 1, #g, 2 do info[g[j]] = g[j + 1] end
      groups[info['name']] = info
    end
    for _, name in ipairs(registries[i]) do
      if not groups[name] then
        return {-7, 'group ' .. name .. ' has never read ' .. lane}
      end
      local p = pauses[i][name]
      if redis.call('EXISTS', KEYS[p], KEYS[p + 1]) > 0 then
        return {-7, 'paused for group ' .. name}
      end
    end
    for name, g in pairs(groups) do
      if tonumber(g['pending']) > 0 then
        return {-7, 'group ' .. name .. ' has pending entries on ' .. lane}
      end
      if last[1] and less(g['last-delivered-id'], last[1][1]) then
        return {-7, 'group ' .. name .. ' is behind on ' .. lane}
      end
    end
  end
end
local announced = {}
for i = 1, n do
  redis.call('DEL', KEYS[3 + i])
  if cluster then
    redis.call('DEL', KEYS[3 + n + i])
  else
    redis.call('SREM', KEYS[3 + n + i], ARGV[4])
    local c = ARGV[5 + i]
    if not announced[c] then
      announced[c] = true
      redis.call('XADD', KEYS[5 + 3 * n], 'MAXLEN', '~', '1000', '*', 'op', 'reaped', 'category', c, 'key', ARGV[4])
    end
  end
end
if cluster then
  redis.call('DEL', KEYS[4 + 3 * n])
end
for i = guards, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[1] then redis.call('DEL', KEYS[i]) end
end
redis.call('DEL', KEYS[1])
return {1}
