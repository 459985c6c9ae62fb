--! include lib/kgroup.lua
-- KEYS: meta, members, member_info, protocols, joining, generation_of, assignment,
--   static, pending_ids, events, consumer_meta, consumer_members, consumer_member,
--   consumer_target, consumer_topics
-- ARGV: none
-- OffsetFetch's token: the group's commit fence now (commit_token in lib/kgroup.lua), which
-- kafka_group/offset_fetch raises the fetched partitions' fences to. Read only.
-- Returns the token (decimal string).
return fmt(commit_token())
