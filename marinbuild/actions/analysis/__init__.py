"""Analysis: what a build is, before anything runs — the graph of the targets patterns name,
each step's action key, and the digests external artifacts are pinned to. Reads the
workspace and (for pins) listings; never runs a step."""
