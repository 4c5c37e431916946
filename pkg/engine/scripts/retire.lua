-- retire.lua: retire a consumer group from a category, compare-and-act. The group leaves
-- the category's group registry and its consumer group is destroyed on every lane of the
-- category, so that trim (which keeps everything from the slowest group present on a lane)
-- and reap (which waits for every registered group) resume. The group's halt records on
-- the category's partitions go too. Nothing changes when a check fails.
--
-- Checks, in order: the group is registered; the partition index holds exactly the keys
-- the caller listed (else a partition was created or reaped meanwhile: list again); no
-- listed lease is held by a live session (the group is running somewhere); the entries
-- the group has read over the lanes (XINFO GROUPS entries-read, summed) equal the figure
-- the operator inspected, when one is given.
--
-- KEYS[1]            group registry of the category (set)
-- KEYS[2]            partition index of the category (set)
-- KEYS[3..2+n]       the category's lane streams: the category stream, each partition's
--                    primary and backfill lanes (missing streams are skipped)
-- KEYS[3+n..2+n+m]   lease keys of the group over the category's units
-- KEYS[3+n+m..]      halt records of the group to delete
-- ARGV[1]  consumer group
-- ARGV[2]  n, the number of lane streams
-- ARGV[3]  m, the number of lease keys
-- ARGV[4]  session key prefix (a lease's owner is live while its session key exists)
-- ARGV[5]  expected entries read, "" for no check
-- ARGV[6]  "apply" to act, "check" to check only (a dry run)
-- ARGV[7..] the partition keys the caller read from the index
-- Returns:
--   {1, read, destroyed, halts}  done (with "check": would be done); read is the group's
--                                entries read, destroyed the lanes whose consumer group
--                                went, halts the halt records deleted
--   {-9}                         the group is not registered for the category
--   {-10}                        the partition index changed: read it again
--   {-8, lease key, value}       a lease of the group is held by a live session
--   {-4, read}                   the entries read differ from the expected figure
local group, n, m = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
if redis.call('SISMEMBER', KEYS[1], group) == 0 then
  return {-9}
end
if redis.call('SCARD', KEYS[2]) ~= #ARGV - 6 then
  return {-10}
end
for i = 7, #ARGV do
  if redis.call('SISMEMBER', KEYS[2], ARGV[i]) == 0 then
    return {-10}
  end
end
for i = 3 + n, 2 + n + m do
  local v = redis.call('GET', KEYS[i])
  if v then
    local owner = string.match(v, '^(.*):%d+$')
    if owner and redis.call('EXISTS', ARGV[4] .. owner) == 1 then
      return {-8, KEYS[i], v}
    end
  end
end
local read, present = 0, {}
for i = 3, 2 + n do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[i])) do
      local info = {}
      for j = 1, #g, 2 do info[g[j]] = g[j + 1] end
      if info['name'] == group then
        present[#present + 1] = KEYS[i]
        read = read + (tonumber(info['entries-read']) or 0)
      end
    end
  end
end
if ARGV[5] ~= '' and tonumber(ARGV[5]) ~= read then
  return {-4, read}
end
local halts = 0
for i = 3 + n + m, #KEYS do
  halts = halts + redis.call('EXISTS', KEYS[i])
end
if ARGV[6] ~= 'apply' then
  return {1, read, #present, halts}
end
for _, lane in ipairs(present) do
  redis.call('XGROUP', 'DESTROY', lane, group)
end
for i = 3 + n + m, #KEYS do
  redis.call('DEL', KEYS[i])
end
redis.call('SREM', KEYS[1], group)
return {1, read, #present, halts}
