"""Layer 4: actions. The graph of a build, action keys, and the scheduler that runs steps."""
