-- replay.lua: re-publish a dead-lettered event at the tail of a partition lane and remove
-- it from the DLQ, in one step, so two operators replaying the same entry (or a retried
-- call) can never publish it twice.
--
-- Only the envelope fields are copied (id, type, category, key, data, priority; the event
-- id is kept so idempotent handlers recognise the event); the time of the publish is the
-- replay's, the new entry id's (a published_at field of the entry is not copied).
-- The new entry rings the lane's doorbell (its id SPUBLISHed on the lane's channel), as a
-- publish does, so an owner waiting on the lane takes it at once.
--
-- KEYS[1]  DLQ stream
-- KEYS[2]  target lane stream
-- KEYS[3]  discovery index of the category, with flag "i"; else KEYS[2]
-- KEYS[4]  control stream, with flag "i"; else KEYS[2]
-- KEYS[5]  doorbell channel of the target lane (sharded pub/sub channel, not a key)
-- KEYS[6]  indexed mark of the partition, with flag "c" (Redis Cluster, where the caller
--          writes the index: see publish.lua); else KEYS[2]
-- ARGV[1]  DLQ entry id
-- ARGV[2]  partition key (index member)
-- ARGV[3]  category
-- ARGV[4]  flags: "i" index in this script (one node, partitioned), "c" report the
--          indexed mark (cluster, partitioned), "" for an unpartitioned stream
-- Returns: {1, new entry id, x}, or {-6} when the DLQ entry is gone (nothing published);
--          x is 1 when flag "c" is given and the indexed mark is missing
local e = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])
if not e[1] then
  return {-6}
end
local keep = {id = true, type = true, category = true, key = true, data = true, priority = true}
local f = e[1][2]
local args = {}
for i = 1, #f, 2 do
  if keep[f[i]] then
    args[#args + 1] = f[i]
    args[#args + 1] = f[i + 1]
  end
end
local id = redis.call('XADD', KEYS[2], '*', unpack(args))
local x = 0
if string.find(ARGV[4], 'c', 1, true) and redis.call('EXISTS', KEYS[6]) == 0 then
  x = 1
end
if string.find(ARGV[4], 'i', 1, true) then
  if redis.call('SADD', KEYS[3], ARGV[2]) == 1 then
    redis.call('XADD', KEYS[4], 'MAXLEN', '~', '1000', '*', 'op', 'partition', 'category', ARGV[3], 'key', ARGV[2])
  end
end
redis.call('XDEL', KEYS[1], ARGV[1])
redis.call('SPUBLISH', KEYS[5], id)
return {1, id, x}
