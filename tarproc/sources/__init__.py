"""Sources: opening inputs by URL, decompression, shard lists, text inputs,
parallel reading."""
