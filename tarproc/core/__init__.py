"""The core: the tar codec (members only), the sample rules, grouping and
ungrouping."""
