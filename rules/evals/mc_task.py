"""`mc_task`'s step: a small multiple-choice task made from a corpus, "which line comes
next?", written as a local task eval_harness runs: `task.yaml` (an lm-eval config) beside
its data files."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from pathlib import Path

from marinbuild.targets.attrs import JsonValue
from marinbuild.targets.context import Context, StepFailed
from rules.common.corpus import SUMMARY, corpus_root, read_split
from rules.evals.constants import SPLIT_FILES, TASK_FILE, TASK_METRICS


def task_config(name: str) -> dict[str, JsonValue]:
    """The lm-eval config of an `mc_task`: the context, then each choice after a newline,
    scored by its log-likelihood (`acc`) and per byte (`acc_norm`); few-shot examples come
    from the train split."""
    return {
        "task": name,
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": dict(SPLIT_FILES)},
        "output_type": "multiple_choice",
        "test_split": "test",
        "fewshot_split": "train",
        "doc_to_text": "context",
        "doc_to_choice": "choices",
        "doc_to_target": "answer",
        "target_delimiter": "\n",
        "metric_list": [{"metric": metric, "aggregation": "mean", "higher_is_better": True} for metric in TASK_METRICS],
        "metadata": {"version": 1},
    }


def next_line_questions(
    documents: Sequence[str], count: int, context_lines: int, choices: int, rng: random.Random
) -> list[dict[str, JsonValue]]:
    """`count` questions "which line comes next?": `context_lines` consecutive non-blank
    lines of a document, its next line among `choices - 1` other lines of the documents,
    in a random order. Places and distractors are drawn by `rng`, so a seed fixes the task."""
    lines = [[line.rstrip() for line in document.splitlines() if line.strip()] for document in documents]
    places = [(index, end) for index, found in enumerate(lines) for end in range(context_lines, len(found))]
    pool = sorted({line for found in lines for line in found})
    if len(places) < count:
        raise StepFailed(
            f"the documents have {len(places)} places for a question of {context_lines} lines of context, "
            f"fewer than the {count} asked for: ask for fewer, or give more data"
        )
    if len(pool) < choices:
        raise StepFailed(f"the documents have {len(pool)} distinct lines, fewer than the {choices} choices asked for")
    questions = []
    for index, end in rng.sample(places, count):
        answer = lines[index][end]
        options = [answer, *rng.sample([line for line in pool if line != answer], choices - 1)]
        rng.shuffle(options)
        context = "\n".join(lines[index][end - context_lines : end])
        questions.append({"context": context, "choices": options, "answer": options.index(answer)})
    return questions


def _write_jsonl(path: Path, rows: Sequence[Mapping[str, JsonValue]]) -> None:
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))


def mc_task(ctx: Context) -> None:
    import yaml

    attrs = ctx.attrs
    root = corpus_root(ctx.files(attrs["data"]))
    rng = random.Random(attrs["seed"])
    shape = (attrs["context_lines"], attrs["choices"])
    test = next_line_questions(list(read_split(root, "validation")), attrs["questions"], *shape, rng)
    train = next_line_questions(list(read_split(root, "train")), attrs["fewshot_examples"], *shape, rng)
    _write_jsonl(ctx.out / SPLIT_FILES["test"], test)
    _write_jsonl(ctx.out / SPLIT_FILES["train"], train)
    name = ctx.label.rpartition(":")[2]
    (ctx.out / TASK_FILE).write_text(yaml.safe_dump(task_config(name), sort_keys=False))
    summary = {"task": name, "questions": {"test": len(test), "train": len(train)}, "choices": attrs["choices"]}
    (ctx.out / SUMMARY).write_text(json.dumps(summary, indent=2) + "\n")
    ctx.log.info("task %s: %s", name, summary)
