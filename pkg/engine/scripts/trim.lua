--#prelude
-- trim.lua: bound a busy partition's growth, fenced. For each lane, drop the prefix that
-- every consumer group has been delivered and acknowledged (XTRIM MINID to the lowest of:
-- each group's oldest pending entry, or its last-delivered id when nothing is pending), and
-- delete this group's consumers of old generations that have nothing pending any more
-- (their entries were reclaimed). A lane with a registered group that has never read it is
-- not trimmed: that group still needs every entry.
--
-- KEYS[1]        lease key
-- KEYS[2]        the caller's session key
-- KEYS[3..2+n]   lane streams
-- KEYS[3+n..2+2n] group registry of each lane's category; on Redis Cluster, where the
--                 registries are in other slots, the lease key again, unread
-- ARGV[1]  token "{owner}:{generation}"
-- ARGV[2]  consumer group
-- ARGV[3]  the caller's consumer name
-- ARGV[4]  n, the number of lanes
-- ARGV[5]  "cluster" on Redis Cluster, else ""
-- ARGV[6..] on Redis Cluster, for each lane: m, then the m groups of its category's
--          registry as the caller read it
-- Returns: {entries trimmed, consumers deleted}, or {-1} fenced
if redis.call('GET', KEYS[1]) ~= ARGV[1] or redis.call('EXISTS', KEYS[2]) == 0 then
  return {-1}
end
local group, me, n = ARGV[2], ARGV[3], tonumber(ARGV[4])
local registries = {}
if ARGV[5] == 'cluster' then
  registries = read_registries(6, n)
end
local function registry(i)
  if registries[i] then return registries[i] end
  return redis.call('SMEMBERS', KEYS[2 + n + i])
end
local trimmed, deleted = 0, 0
for i = 1, n do
  local lane = KEYS[2 + i]
  if redis.call('EXISTS', lane) == 1 then
    local present = {}
    local bound = nil
    for _, g in ipairs(redis.call('XINFO', 'GROUPS', lane)) do
      local info = {}
      for j = 1, #g, 2 do info[g[j]] = g[j + 1] end
      present[info['name']] = true
      local b = info['last-delivered-id']
      if tonumber(info['pending']) > 0 then
        b = redis.call('XPENDING', lane, info['name'], '-', '+', 1)[1][1]
      end
      if bound == nil or less(b, bound) then bound = b end
    end
    local complete = true
    for _, name in ipairs(registry(i)) do
      if not present[name] then complete = false end
    end
    if complete and bound and bound ~= '0-0' then
      trimmed = trimmed + redis.call('XTRIM', lane, 'MINID', bound)
    end
    if present[group] then
      for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', lane, group)) do
        local info = {}
        for j = 1, #c, 2 do info[c[j]] = c[j + 1] end
        if info['name'] ~= me and tonumber(info['pending']) == 0 then
          redis.call('XGROUP', 'DELCONSUMER', lane, group, info['name'])
          deleted = deleted + 1
        end
      end
    end
  end
end
return {trimmed, deleted}
