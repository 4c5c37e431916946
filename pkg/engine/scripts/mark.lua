-- mark.lua: the last step of a publish on Redis Cluster (see publish.lua and the protocol
-- in docs/concepts.md): set the partition's indexed mark, but only while the lane the
-- publisher appended to exists. A reap that deleted the lane (and the mark) after the
-- publisher wrote the index leaves the mark missing, so the key's next publish writes the
-- index again instead of trusting a mark that outlived its stream.
--
-- KEYS[1]  indexed mark of the partition (string)
-- KEYS[2]  the lane stream the publisher appended to (same slot)
-- Returns: 1 marked, 0 not (the lane is gone)
if redis.call('EXISTS', KEYS[2]) == 0 then
  return 0
end
redis.call('SET', KEYS[1], '1')
return 1
