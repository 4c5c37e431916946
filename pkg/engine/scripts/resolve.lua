-- resolve.lua: an operator's compare-and-act on a partition's head for one group:
-- skip it, move it to the partition's DLQ, or retry it. Acts only if the head is still
-- the entry the operator inspected.
--
-- The head is the entry named by the halt record when the partition is halted, else the
-- group's oldest pending entry of the lane.
--
-- KEYS[1]  halt record (hash)
-- KEYS[2]  lane stream the head is on
-- KEYS[3]  DLQ stream of the partition ({category}:{key}:dlq)
-- KEYS[4]  lease key (to find the owner to wake)
-- ARGV[1]  action: "skip" | "dlq" | "retry"
-- ARGV[2]  consumer group
-- ARGV[3]  expected head entry id
-- ARGV[4]  "force" to act on a head that is not halted, else ""
-- ARGV[5]  wake-stream prefix (the owner's doorbell is prefix .. instance id); "" on
--          Redis Cluster, where the wake stream is in another slot: the caller wakes
--          the owner from the lease value returned
-- ARGV[6..] extra DLQ fields (field/value pairs: moved_by, reason ...)
-- Returns:
--   {1, id, lease} done; lease is the lease value of the unit ("" when none)
--   {-4, head}     the head is not the expected entry (head is "" when there is none)
--   {-5, head}     the head is not halted and force was not given
--   {-6}           entry no longer in the stream (trimmed or deleted); nothing done
local action, group, expect = ARGV[1], ARGV[2], ARGV[3]
local halted = redis.call('HGET', KEYS[1], 'entry')
local head = halted
if not head then
  local p = redis.call('XPENDING', KEYS[2], group, '-', '+', 1)
  if p[1] then head = p[1][1] end
end
if head ~= expect then
  return {-4, head or ''}
end
if halted and redis.call('HGET', KEYS[1], 'stream') ~= KEYS[2] then
  return {-4, head}
end
if not halted and ARGV[4] ~= 'force' then
  return {-5, head}
end
if action == 'retry' then
  if not halted then return {-5, head} end
  redis.call('DEL', KEYS[1])
else
  if action == 'dlq' then
    local e = redis.call('XRANGE', KEYS[2], expect, expect)
    if not e[1] then return {-6} end
    local fields = e[1][2]
    local h = redis.call('HGETALL', KEYS[1])
    for i = 1, #h, 2 do
      fields[#fields + 1] = 'halt_' .. h[i]
      fields[#fields + 1] = h[i + 1]
    end
    fields[#fields + 1] = 'original_id'
    fields[#fields + 1] = expect
    fields[#fields + 1] = 'group'
    fields[#fields + 1] = group
    for i = 6, #ARGV do fields[#fields + 1] = ARGV[i] end
    redis.call('XADD', KEYS[3], '*', unpack(fields))
  end
  redis.call('XACK', KEYS[2], group, expect)
  redis.call('DEL', KEYS[1])
end
local lease = redis.call('GET', KEYS[4])
if lease and ARGV[5] ~= '' then
  -- lease "{instance}.{incarnation}:{generation}": the doorbell is per instance.
  local instance = string.match(lease, '^(.*)%.%w+:%d+$')
  if instance then
    redis.call('XADD', ARGV[5] .. instance, 'MAXLEN', '~', '100', '*', 'op', 'resume', 'group', group, 'unit', KEYS[2])
  end
end
return {1, expect, lease or ''}
