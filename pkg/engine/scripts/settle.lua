-- settle.lua: the last command of a busy partition's read transaction
--
--   MULTI; EVALSHA drain.lua (ARGV[7] = nonce); XREADGROUP ... > ; EVAL settle.lua; EXEC
--
-- The XREADGROUP runs whatever drain.lua answered, even when drain.lua did not run at
-- all (NOSCRIPT after the script cache was emptied): it cannot be made conditional. Its
-- entries may be used only when drain.lua allowed the read, which it says by writing the
-- transaction's nonce into the read mark. Otherwise the entries it took were delivered
-- to the caller's consumer without reaching a handler: this script gives them back their
-- delivery count of 0 (they were new entries, never delivered before), so the run that
-- later claims them counts as attempt 1. They stay pending in publish order, under the
-- consumer __unstarted__ (see drain.lua), to be claimed in order by the owner of the
-- lease.
--
-- This script is sent with EVAL, never EVALSHA, so it runs even when the script cache
-- was emptied. It touches only entries pending under the caller's own consumer that no
-- one claimed since its read, so it needs no lease: it cannot advance the partition.
--
-- KEYS[1]  the first lane stream (the one the XREADGROUP read)
-- KEYS[2]  read mark of the partition for this group (string), see drain.lua
-- ARGV[1]  consumer group
-- ARGV[2]  the caller's consumer name
-- ARGV[3]  the transaction's nonce
-- ARGV[4]  the last entry id the caller read before this transaction: the XREADGROUP's
--          entries are after it
-- ARGV[5]  the batch size of the XREADGROUP
-- Returns: 1 the read stands; {0, n} the read was refused and n entries were given back
-- next_id returns the stream id right after id ("ms-seq"): an exclusive range start that
-- every server understands.
local function next_id(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return ms .. '-' .. string.format('%d', tonumber(seq) + 1)
end
if redis.call('GET', KEYS[2]) == ARGV[3] then
  redis.call('DEL', KEYS[2])
  return 1
end
local p = redis.pcall('XPENDING', KEYS[1], ARGV[1], next_id(ARGV[4]), '+', ARGV[5], ARGV[2])
if type(p) ~= 'table' or p.err then
  return {0, 0}
end
-- XCLAIM stream group __unstarted__ 0 id... RETRYCOUNT 0 JUSTID (ids must come last in a
-- Lua call's argument list to all be passed, so the command is built whole)
local cmd = {'XCLAIM', KEYS[1], ARGV[1], '__unstarted__', 0}
for _, e in ipairs(p) do
  if tonumber(e[4]) == 1 then cmd[#cmd + 1] = e[1] end
end
local n = #cmd - 5
if n > 0 then
  cmd[#cmd + 1], cmd[#cmd + 2], cmd[#cmd + 3] = 'RETRYCOUNT', 0, 'JUSTID'
  redis.call(unpack(cmd))
end
return {0, n}
