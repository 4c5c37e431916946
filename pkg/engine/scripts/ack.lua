-- ack.lua: acknowledge handled entries of one lane, fenced.
--
-- KEYS[1]  lease key
-- KEYS[2]  the caller's session key
-- KEYS[3]  lane stream
-- ARGV[1]  token "{owner}:{generation}"
-- ARGV[2]  consumer group
-- ARGV[3..] entry ids
-- Returns: number of entries acknowledged, or -1 fenced (nothing acknowledged)
local fence = redis.call('MGET', KEYS[1], KEYS[2])
if fence[1] ~= ARGV[1] or not fence[2] then
  return -1
end
return redis.call('XACK', KEYS[3], ARGV[2], unpack(ARGV, 3))
