"""What each command does, given a session (marinbuild/session.py): one module per group.

build       plan, then run what is stale (or say what would run, dry), with the machine's
            accelerators checked; a no-op answered by its certificate (certified)
invocation  the invocation record and event stream of every run of steps (build, rerun)
rerun       rebuild a stored recipe from the store alone; `--check` runs it again aside
outputs     where a built target's output is (`where`), its metrics, the key of a label
inspect     show, explain, attempts (`log`) and history: what the store recorded
compare     training runs side by side
cache_keys  the keys `cache gc` keeps and `cache verify` checks
pin         pin external artifacts
query       Bazel's query language over the graph, with the store's functions

The CLI (marinbuild/cli/) parses arguments and prints; `marinbuild.api` is the same for
notebooks. Both call these, which return data and raise marinbuild's errors.
"""
