-- ackmany.lua: acknowledge handled entries of many partition lanes of one instance in
-- one call, each lane fenced by its own lease. One round trip per flush, whatever the
-- number of partitions, keeps the strict acknowledgement mode (max_unacked = 1) fast.
--
-- KEYS[1]      the caller's session key
-- KEYS[2..]    pairs, one per partition lane: its lease key, then its lane stream
-- ARGV[1..]    for each pair in KEYS order: token "{owner}:{generation}", consumer group,
--              n, then n entry ids
-- Returns:
--   {-3}               the caller's session is gone: nothing was acknowledged
--   {r1, r2, ...}      one integer per pair: the number of entries acknowledged, or -1
--                      when that lane's lease is not the caller's (nothing acknowledged
--                      there)
-- The session and every lease in one MGET (in chunks: a Lua call takes a bounded number
-- of arguments).
local held = {}
local names = {KEYS[1]}
for k = 2, #KEYS, 2 do names[#names + 1] = KEYS[k] end
for i = 1, #names, 1000 do
  local vals = redis.call('MGET', unpack(names, i, math.min(i + 999, #names)))
  for j = 1, #vals do held[i + j - 1] = vals[j] end
end
if not held[1] then
  return {-3}
end
local out = {}
local a = 1
for k = 2, #KEYS, 2 do
  local token, group, n = ARGV[a], ARGV[a + 1], tonumber(ARGV[a + 2])
  if held[k / 2 + 1] ~= token then
    out[#out + 1] = -1
  else
    out[#out + 1] = redis.call('XACK', KEYS[k + 1], group, unpack(ARGV, a + 3, a + 2 + n))
  end
  a = a + 3 + n
end
return out
