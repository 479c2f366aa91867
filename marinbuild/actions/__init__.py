"""Actions: the graph of a build, action keys, and the scheduler that runs stale steps."""
