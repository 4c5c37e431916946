-- stateprune.lua: remove from a state index the members a reader found without a halt
-- or pause record, but only those written longer ago than the grace period: a writer
-- adds its member before it writes the record (stateindex.lua), so a member younger
-- than the grace may belong to a record on its way, and a member re-added since the
-- reader looked carries a new stamp and stays.
--
-- KEYS[1]  state index (sorted set: member -> ms of its last write)
-- ARGV[1]  grace period in ms
-- ARGV[2..] members whose record the reader found missing
-- Returns: how many members were removed
local t = redis.call('TIME')
local cutoff = t[1] * 1000 + math.floor(t[2] / 1000) - tonumber(ARGV[1])
local n = 0
for i = 2, #ARGV do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if score and tonumber(score) <= cutoff then
    n = n + redis.call('ZREM', KEYS[1], ARGV[i])
  end
end
return n
