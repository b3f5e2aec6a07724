"""Sinks: outputs with commit-on-success, writing and splitting shards, tables,
previews and checks."""
