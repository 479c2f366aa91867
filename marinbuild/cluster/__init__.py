"""Running steps beyond this machine: resource placement and the Ray executor."""
