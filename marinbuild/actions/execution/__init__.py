"""Execution: running the stale steps of a graph. The scheduler composes one part per concern
(planning, mirror copies, checkpoint reads, running); an attempt runs the same way in a
thread, a worker process or on a Ray host (attempt.py), within the sandbox (hermetic.py)."""
