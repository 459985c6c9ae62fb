"""Everything that knows Redis: key names, the offset codec, Lua scripts, partitioner, assignors."""
