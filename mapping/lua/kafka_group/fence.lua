--! include _kgroup.lua
-- OffsetFetch's token: the group's commit fence now (commit_token in _kgroup.lua), which
-- kgroup_offset_fetch raises the fetched partitions' fences to. Read only.
-- Returns the token (decimal string).
return fmt(commit_token())
