"""The runtime: the ordered engine and its error policy, worker pools, child
processes, and the stall hooks that flush output while input waits."""
