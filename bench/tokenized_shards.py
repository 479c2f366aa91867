"""A training's start over a token cache of 1,000+ shards: one ledger, not one per shard.

`tokenize` writes each split as one Levanter cache whose one ledger (`shard_ledger.json`,
Levanter's finished-cache ledger: every shard's rows and the total) says all a reader
needs, however many corpus shards went in; `train_lm` opens it through Levanter's
`TreeCache.load`, one ledger read. The shard-by-shard read it replaces is a cache per
shard, each opened for its ledger before the first step (what made Marin's users wait
4.5 minutes for 1,113 shards on GCS). Measured here, in the same run:

1. **Levanter**: the same rows (`--shards` shards of `--docs-per-shard` documents) written
   as one cache and as a cache per shard; the seconds to open them and read the first
   row, one cache against every shard's one by one; then the ledgers alone read from a
   `gs://` bucket (fake-gcs-server behind bench/store.py's proxy adding `--delay-ms` to
   each request): one ledger against a ledger per shard.
2. **marinbuild**: `train_lm` (the tutorial's nano Llama, `--steps` steps) over a
   `tokenize` of a corpus of `--shards` shards and over one of a single shard holding the
   same documents, after an untimed training of the same shapes (JAX's compilation cache
   then serves both alike), twice each, who goes first alternating: the medians of each
   training's `time_to_first_step_s` and
   `cpu_to_first_step_s` (`marinbuild show --json`), their ratio, and how many ledgers
   each tokenized split holds.

Usage: ``python bench/tokenized_shards.py [--shards N] [--docs-per-shard D] [--delay-ms MS]
[--steps S] [--skip-training] [--json-out FILE]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import benchlib
from train_overhead import PKG, examples_workspace, marinbuild, measured, recipe, target, with_steps

LEDGER = "shard_ledger.json"  # Levanter's (levanter.store.cache.LEDGER_FILE_NAME)
ROUNDS = 2  # trainings of each layout, who goes first alternating
CORPUS_RULES = '''
"""A corpus of many tiny shards (rules/common/corpus.py's layout), for the benchmark."""

import json

from marinbuild.targets import Attr, Rule
from marinbuild.targets import attrs as types


def _corpus(ctx):
    shards, per_shard = ctx.attrs["shards"], ctx.attrs["docs_per_shard"]
    documents = [f"Document {i} of the corpus says {i * 7} and then {i % 13}." for i in range(shards * per_shard)]
    validation = documents[::10]
    train = [text for i, text in enumerate(documents) if i % 10]
    for split, texts in (("train", train), ("validation", validation)):
        (ctx.out / split).mkdir()
        count = shards if split == "train" else 1
        for shard in range(count):
            lines = "".join(json.dumps({"text": text}) + "\\n" for text in texts[shard::count])
            (ctx.out / split / f"shard-{shard:05d}.jsonl").write_text(lines)
    summary = {"documents": {"train": len(train), "validation": len(validation)}}
    (ctx.out / "summary.json").write_text(json.dumps(summary))


sharded_corpus = Rule(
    name="sharded_corpus", impl=_corpus, attrs={"shards": Attr(types.INT), "docs_per_shard": Attr(types.INT)}
)
'''


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=int, default=1113, help="default: %(default)s (Marin's 1,113)")
    parser.add_argument("--docs-per-shard", type=int, default=4, help="default: %(default)s")
    parser.add_argument("--delay-ms", type=int, default=30, help="the proxy's delay per request (default: %(default)s)")
    parser.add_argument("--repeat", type=int, default=3, help="opens timed each way (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=2, help="training steps of each run (default: %(default)s)")
    parser.add_argument("--skip-training", action="store_true", help="only Levanter's opens")
    parser.add_argument("--skip-bucket", action="store_true", help="no ledgers read from a bucket")
    parser.add_argument("--json-out", type=Path)
    return parser.parse_args(argv)


# -- Levanter: one cache against a cache per shard ---------------------------------------


def _write_cache(directory: Path, rows: Sequence[Any]) -> None:
    import numpy as np
    from levanter.store.cache import CacheMetadata, SerialCacheWriter

    exemplar = {"input_ids": np.zeros((0,), dtype=np.int32)}
    with SerialCacheWriter(str(directory), exemplar, metadata=CacheMetadata({})) as writer:
        writer.write_batch([{"input_ids": row} for row in rows])


def _open_and_read_first(directories: Sequence[Path]) -> int:
    """Open each cache in turn (its ledger, its arrays) and read its first row: the rows of all."""
    import numpy as np
    from levanter.store.cache import TreeCache

    exemplar = {"input_ids": np.zeros((0,), dtype=np.int32)}
    rows = 0
    for directory in directories:
        cache = TreeCache.load(str(directory), exemplar)
        rows += len(cache)
        cache[0]  # noqa: B018  (the read a first step makes)
    return rows


def _median_s(function: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def levanter_figures(root: Path, args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np

    generator = np.random.default_rng(0)
    shards = [
        [
            generator.integers(0, 2048, size=int(generator.integers(8, 64)), dtype=np.int32)
            for _ in range(args.docs_per_shard)
        ]
        for _ in range(args.shards)
    ]
    one = root / "one"
    _write_cache(one, [row for shard in shards for row in shard])
    per_shard = [root / "per-shard" / f"shard-{index:05d}" for index in range(args.shards)]
    for directory, rows in zip(per_shard, shards):
        _write_cache(directory, rows)
    expected = sum(map(len, shards))
    if _open_and_read_first([one]) != expected or _open_and_read_first(per_shard) != expected:
        raise benchlib.BenchError("the two layouts do not hold the same rows")
    one_s = _median_s(lambda: _open_and_read_first([one]), args.repeat)
    per_shard_s = _median_s(lambda: _open_and_read_first(per_shard), args.repeat)
    figures: dict[str, Any] = {
        "shards": args.shards,
        "rows": expected,
        "open_one_cache_s": one_s,
        "open_per_shard_s": per_shard_s,
        "per_shard_to_one": per_shard_s / one_s,
    }
    if not args.skip_bucket:
        figures["bucket"] = bucket_ledgers(one, per_shard, args)
    return figures


def bucket_ledgers(one: Path, per_shard: Sequence[Path], args: argparse.Namespace) -> dict[str, Any]:
    """The ledgers alone, read by Levanter from a bucket behind the proxy: one, and one per shard."""
    from levanter.store.cache import CacheLedger
    from store import EMULATOR, LatencyProxy, start_server

    server = start_server()
    try:
        import gcsfs

        fs = gcsfs.GCSFileSystem(token="anon")
        fs.mkdir("bench")
        fs.put_file(str(one / LEDGER), f"bench/one/{LEDGER}")
        fs.put([str(directory / LEDGER) for directory in per_shard], [f"bench/{d.name}/{LEDGER}" for d in per_shard])
        proxy = LatencyProxy(server.url, args.delay_ms / 1000)
        os.environ[EMULATOR] = proxy.url
        try:
            gcsfs.GCSFileSystem.clear_instance_cache()  # a new client, through the proxy

            def read(names: Sequence[str]) -> int:
                return sum(CacheLedger.load(f"gs://bench/{name}").total_num_rows for name in names)

            one_s = _median_s(lambda: read(["one"]), args.repeat)
            per_shard_s = _median_s(lambda: read([directory.name for directory in per_shard]), 1)
        finally:
            proxy.close()
            os.environ[EMULATOR] = server.url
    finally:
        server.stop()
    return {
        "delay_ms": args.delay_ms,
        "one_ledger_s": one_s,
        "ledger_per_shard_s": per_shard_s,
        "per_shard_to_one": per_shard_s / one_s,
    }


# -- marinbuild: train_lm over a tokenize of many shards ---------------------------------


def training_figures(root: Path, args: argparse.Namespace) -> dict[str, Any]:
    ws = examples_workspace(root)
    (ws / "sharded_corpus.py").write_text(CORPUS_RULES)
    config = ws / "marinbuild.toml"
    config.write_text(config.read_text().replace("rules = [", 'rules = ["sharded_corpus", ', 1))
    _rule, model = recipe(ws, "//experiments/tutorial:model")
    documents = args.shards * args.docs_per_shard
    layouts = {"many": args.shards, "one": 1}
    targets = ""
    for name, shards in layouts.items():
        targets += target("sharded_corpus", f"corpus_{name}", {"shards": shards, "docs_per_shard": documents // shards})
        targets += target("tokenize", f"tokens_{name}", {"data": f":corpus_{name}", "tokenizer": ":tokenizer"})
        for round_ in range(ROUNDS):
            values = {**with_steps(model, args.steps, seed=round_), "data": f":tokens_{name}"}
            targets += target("train_lm", f"model_{name}_{round_}", values)
    # The same shapes once before, untimed: both timed runs find JAX's programs compiled.
    warmup = {**with_steps(model, args.steps, seed=ROUNDS), "data": ":tokens_one"}
    targets += target("train_lm", "warmup", warmup)
    targets += target("bpe_tokenizer", "tokenizer", {"data": ":corpus_one", "vocab_size": 512})
    (ws / "bench" / "BUILD.marin").write_text(targets)
    benchlib.log("building the corpora, the tokenizer, the token caches and a first training (untimed)")
    labels = [*(f"{PKG}:tokens_{name}" for name in layouts), f"{PKG}:warmup"]
    built = json.loads(marinbuild(ws, "build", "--json", *labels))
    outputs = {item["label"]: Path(item["output"]) for item in built["targets"]}
    figures: dict[str, Any] = {"documents": documents}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in layouts}
    for round_ in range(ROUNDS):  # who goes first alternates
        for name in list(layouts) if round_ % 2 == 0 else list(reversed(layouts)):
            benchlib.log(f"training over the tokenize of {layouts[name]} shards (round {round_})")
            marinbuild(ws, "build", "--json", f"{PKG}:model_{name}_{round_}")
            runs[name].append(measured(ws, f"{PKG}:model_{name}_{round_}"))
    for name in layouts:
        tokens, corpus = outputs[f"{PKG}:tokens_{name}"], outputs[f"{PKG}:corpus_{name}"]
        figures[name] = {
            "corpus_shards": len(list((corpus / "train").glob("shard-*.jsonl"))),
            "ledgers_per_split": len(list((tokens / "train").rglob(LEDGER))),
            **{
                figure: statistics.median(run[figure] for run in runs[name])
                for figure in ("time_to_first_step_s", "cpu_to_first_step_s")
            },
            "rounds": [
                {figure: run[figure] for figure in ("time_to_first_step_s", "cpu_to_first_step_s")}
                for run in runs[name]
            ],
        }
    many, one = figures["many"], figures["one"]
    figures["many_to_one"] = many["time_to_first_step_s"] / one["time_to_first_step_s"]
    figures["many_to_one_cpu"] = many["cpu_to_first_step_s"] / one["cpu_to_first_step_s"]
    return figures


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    report: dict[str, Any] = {"host": benchlib.host_info(), "load_before": benchlib.load_average()}
    with tempfile.TemporaryDirectory(prefix="marinbuild-bench-tokenized-") as temporary:
        root = Path(temporary)
        report["levanter"] = levanter_figures(root / "levanter", args)
        if not args.skip_training:
            report["training"] = training_figures(root / "training", args)
    report["load_after"] = benchlib.load_average()
    levanter = report["levanter"]
    print(
        f"{levanter['shards']} shards, {levanter['rows']} rows: open and read the first row of one cache "
        f"{levanter['open_one_cache_s'] * 1000:.1f} ms, of a cache per shard {levanter['open_per_shard_s']:.2f} s "
        f"({levanter['per_shard_to_one']:.0f} x)"
    )
    if "bucket" in levanter:
        bucket = levanter["bucket"]
        print(
            f"  ledgers from a bucket behind {bucket['delay_ms']} ms: one {bucket['one_ledger_s'] * 1000:.0f} ms, "
            f"one per shard {bucket['ledger_per_shard_s']:.1f} s ({bucket['per_shard_to_one']:.0f} x)"
        )
    if "training" in report:
        training = report["training"]
        for name in ("many", "one"):
            figures = training[name]
            print(
                f"train_lm over a tokenize of {figures['corpus_shards']} corpus shards: first step after "
                f"{figures['time_to_first_step_s']:.1f} s ({figures['cpu_to_first_step_s']:.1f} s CPU), "
                f"{figures['ledgers_per_split']} ledger in its train split"
            )
        print(
            f"  {training['many_to_one']:.2f} x the single shard's time to first step "
            f"({training['many_to_one_cpu']:.2f} x its CPU time)"
        )
    if args.json_out:
        benchlib.write_json(args.json_out, report)


if __name__ == "__main__":
    main()
