"""chat_data and sft_lm: supervised fine-tuning on chat data, the loss on the assistant's tokens.

The base model is test_train_lm.py's tiny Llama (1 layer, d=32, 64-token sequences),
trained for a few steps and exported as test_hf_model.py's is; the chat set is made from
the standard library's docstrings. The assistant-only loss is checked on the examples
Levanter trains on, built from the caches sft_lm writes, in this process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
from conftest import build_json, cli_env, run_cli, start_to_kill, statuses
from helpers_hf import hf_logits
from helpers_lm import lm_workspace, wait_for_checkpoint
from helpers_workspace import assert_bad_declarations

from rules.common.stdlib import stdlib_inputs
from rules.posttrain.chat_data import conversations
from rules.posttrain.constants import ASSISTANT, DEFAULT_CHAT_TEMPLATE, MESSAGES, chat_problem

CONFIG = 'rules = ["rules.data.decls", "rules.tokenize.decls", "rules.lm.decls", "rules.posttrain.decls"]\n'
# The whole pipeline in one build, base model to fine-tuned exports, on two cores.
BUILD_TIMEOUT_S = 1800
# As test_hf_model.py's: float32 on the CPU, two implementations of the same arithmetic.
LOGITS_ATOL = 1e-4
TRAINER = '{"steps": 6, "batch_size": 4, "eval_interval": 3, "max_eval_batches": 2}'
BASE = f"""
load("//rules/lm:lm.star", "llama", "lora")
python_corpus(name = "corpus", sample_count = 60, chunk_characters = 1500, validation_fraction = 0.1)
bpe_tokenizer(name = "tokenizer", data = ":corpus", vocab_size = 300)
tokenize(name = "tokens", data = ":corpus", tokenizer = ":tokenizer")
train_lm(
    name = "model",
    data = ":tokens",
    model = llama(hidden = 32, layers = 1, heads = 2, seq_len = 64),
    optimizer = {{"learning_rate": 3e-3}},
    trainer = {TRAINER},
)
export_hf(name = "export", model = ":model")
hf_model(name = "base", dir = ":export")
chat_data(name = "chats", sample_count = 120, answer_characters = 120, validation_fraction = 0.1)
"""
# Every weight from the Hugging Face checkpoint; LoRA from the trained model itself; and
# from the LoRA output, at a learning rate of 1e-9, a run whose first evaluation (after its
# first step) is the evaluation of the merged weights it starts from.
FINE_TUNED = f"""
sft_lm(name = "sft", model = ":base", data = ":chats", optimizer = {{"learning_rate": 3e-3}}, trainer = {TRAINER})
sft_lm(
    name = "sft_lora",
    model = ":model",
    data = ":chats",
    optimizer = {{"learning_rate": 1e-2}},
    trainer = {TRAINER},
    lora = lora(r = 4, alpha = 8.0),
)
sft_lm(
    name = "after_lora",
    model = ":sft_lora",
    data = ":chats",
    optimizer = {{"learning_rate": 1e-9}},
    trainer = {{"steps": 2, "batch_size": 4, "max_eval_batches": 2}},
)
eval_lm(name = "eval_lora", model = ":sft_lora", data = [":tokens"], max_batches = 2)
export_hf(name = "export_lora", model = ":sft_lora")
"""
# A template whose generation block never renders: no conversation has an assistant token.
BOT_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'bot' %}{% generation %}{{ message['content'] }}"
    "{% endgeneration %}{% else %}{{ message['content'] }}{% endif %}{% endfor %}"
)
BAD = f"""
sft_lm(name = "no_messages", model = ":base", data = ":corpus", trainer = {{"steps": 2}})
sft_lm(name = "no_assistant_tokens", model = ":base", data = ":chats", chat_template = "{BOT_TEMPLATE}",
       trainer = {{"steps": 2}})
"""


def _ws(root: Path, build_file: str) -> Path:
    ws = lm_workspace(root, build_file)
    (ws / "marinbuild.toml").write_text(CONFIG)
    return ws


def _build(ws: Path, *args: str, expect_rc: int = 0) -> dict:
    rc, out, err = run_cli(ws, "build", "--json", *args, timeout=BUILD_TIMEOUT_S)
    assert rc == expect_rc, f"exit {rc}\n{out}\n{err}"
    return {item["label"]: item for item in json.loads(out)["targets"]} | {"stderr": err}


def _read(data: dict, label: str, name: str) -> dict:
    return json.loads((Path(data[label]["output"]) / name).read_text())


def test_fine_tuning_with_and_without_lora(tmp_path: Path) -> None:
    ws = _ws(tmp_path / "ws", BASE + FINE_TUNED + BAD)
    data = _build(ws, "--keep-going", "//exp:all", expect_rc=1)

    # A chat file without messages, a template that marks no assistant tokens: each fails in
    # one line naming the line it read, before Levanter trains anything.
    reasons = {label: item.get("reason") for label, item in data.items() if label != "stderr"}
    assert reasons["//exp:no_messages"] == (
        '//exp:corpus:train/shard-00000.jsonl:1: no "messages" list (a chat line is '
        '{"messages": [{"role": "user", "content": "..."}, ...]})'
    )
    assert reasons["//exp:no_assistant_tokens"] == (
        "//exp:chats:train/shard-00000.jsonl:1: the chat template marks none of this conversation's tokens as "
        "the assistant's: its {% generation %} block must hold the assistant's messages"
    )
    assert "Traceback" not in data["stderr"]
    built = {label for label, item in data.items() if label != "stderr" and item["status"] == "built"}
    assert built == {label for label in reasons if label not in ("//exp:no_messages", "//exp:no_assistant_tokens")}

    # Both learn to answer: the validation loss on the assistant's tokens falls.
    full, adapted = _read(data, "//exp:sft", "summary.json"), _read(data, "//exp:sft_lora", "summary.json")
    for summary in (full, adapted):
        assert summary["steps"] == 6 and summary["tokens"] == 6 * 4 * 64
        assert summary["eval_loss"] < summary["initial_eval_loss"] - 0.1, summary

    # A training's output, as train_lm's: the base's architecture and tokenizer, which
    # carries the chat template it was taught with.
    sft = Path(data["//exp:sft"]["output"])
    assert {path.name for path in sft.iterdir()} == {
        "checkpoint",
        "tokenizer",
        "metrics.jsonl",
        "model.json",
        "summary.json",
    }
    assert [json.loads(line)["step"] for line in (sft / "metrics.jsonl").read_text().splitlines()] == list(range(6))
    base_record, record = _read(data, "//exp:model", "model.json"), _read(data, "//exp:sft", "model.json")
    assert record["model"] == base_record["model"] and record["tokenizer_blake3"] == base_record["tokenizer_blake3"]
    assert (
        json.loads((sft / "tokenizer" / "tokenizer_config.json").read_text())["chat_template"] == DEFAULT_CHAT_TEMPLATE
    )

    # LoRA's output holds the merged weights alone (no adapters, no optimizer state), which a
    # run started from it evaluates as the LoRA run's last evaluation did...
    lora = Path(data["//exp:sft_lora"]["output"])
    assert {path.name for path in (lora / "checkpoint").iterdir()} == {"metadata.json", "model"}
    assert not list((lora / "checkpoint").rglob("lora*"))
    after = _read(data, "//exp:after_lora", "summary.json")
    assert abs(after["initial_eval_loss"] - adapted["eval_loss"]) < 1e-4, (after, adapted)
    # ... eval_lm reads on the base's tokenized text, and export_hf exports: transformers'
    # logits are Levanter's, and the export chats with the template.
    assert _read(data, "//exp:eval_lora", "metrics.json")["loss"] > 0
    exported = Path(data["//exp:export_lora"]["output"])
    [(ours, theirs)] = hf_logits([(lora, exported)])
    np.testing.assert_allclose(theirs, ours, rtol=0, atol=LOGITS_ATOL)
    assert (exported / "chat_template.jinja").read_text() == DEFAULT_CHAT_TEMPLATE

    # A second build reruns nothing; compare shows the runs side by side.
    good = sorted(built)
    assert set(statuses(build_json(ws, *good)).values()) == {"cached"}
    rc, table, err = run_cli(ws, "compare", "//exp:sft", "//exp:sft_lora", "--by", "eval_loss")
    assert rc == 0, err
    assert "lora.r" in table.splitlines()[0] and "best by eval_loss (lowest): //exp:sft" in table, table


# The other families train_lm trains, fine-tuned as a Llama is: a Mixtral from its train_lm
# run (exported in the step) with every weight and with LoRA, a Qwen 2 from its run, an
# OLMo 2 from its Hugging Face checkpoint; and a checkpoint of a family train_lm does not train.
FAMILIES = f"""
load("//rules/lm:lm.star", "lora", "mixtral", "olmo2", "qwen")
python_corpus(name = "corpus", sample_count = 60, chunk_characters = 1500, validation_fraction = 0.1)
bpe_tokenizer(name = "tokenizer", data = ":corpus", vocab_size = 300)
tokenize(name = "tokens", data = ":corpus", tokenizer = ":tokenizer")
chat_data(name = "chats", sample_count = 120, answer_characters = 120, validation_fraction = 0.1)
train_lm(
    name = "moe",
    data = ":tokens",
    model = mixtral(hidden = 32, layers = 1, heads = 2, experts = 4, experts_per_token = 2, intermediate = 64,
                    seq_len = 64),
    optimizer = {{"learning_rate": 3e-3}},
    trainer = {TRAINER},
)
sft_lm(name = "moe_sft", model = ":moe", data = ":chats", optimizer = {{"learning_rate": 3e-3}}, trainer = {TRAINER})
sft_lm(name = "moe_lora", model = ":moe", data = ":chats", optimizer = {{"learning_rate": 1e-2}}, trainer = {TRAINER},
       lora = lora(r = 4, alpha = 8.0))
export_hf(name = "moe_sft_hf", model = ":moe_sft")
train_lm(name = "qwen", data = ":tokens", model = qwen(hidden = 32, layers = 1, heads = 2, seq_len = 64),
         optimizer = {{"learning_rate": 3e-3}}, trainer = {TRAINER})
sft_lm(name = "qwen_sft", model = ":qwen", data = ":chats", optimizer = {{"learning_rate": 3e-3}}, trainer = {TRAINER})
train_lm(name = "olmo2", data = ":tokens", model = olmo2(hidden = 32, layers = 1, heads = 2, seq_len = 64),
         optimizer = {{"learning_rate": 3e-3}}, trainer = {TRAINER})
export_hf(name = "olmo2_hf", model = ":olmo2")
hf_model(name = "olmo2_base", dir = ":olmo2_hf", family = "olmo2")
sft_lm(name = "olmo2_sft", model = ":olmo2_base", data = ":chats", optimizer = {{"learning_rate": 3e-3}},
       trainer = {TRAINER})
py_step(name = "gpt2", fn = "steps.py:checkpoint", deps = ["gpt2.json"])
sft_lm(name = "gpt2_sft", model = ":gpt2", data = ":chats", trainer = {TRAINER})
"""
# A step that makes a checkpoint of its input: its config.json, at its output's root.
CHECKPOINT_STEP = """
import shutil

def checkpoint(ctx):
    shutil.copyfile(ctx.location("//exp:gpt2.json"), ctx.out / "config.json")
"""


def test_every_family_train_lm_trains_is_fine_tuned(tmp_path: Path) -> None:
    from transformers import GPT2Config

    ws = _ws(tmp_path / "ws", FAMILIES)
    (ws / "exp" / "steps.py").write_text(CHECKPOINT_STEP)
    GPT2Config(vocab_size=300, n_positions=64, n_embd=32, n_layer=1, n_head=2).to_json_file(ws / "exp" / "gpt2.json")
    data = _build(ws, "--keep-going", "//exp:all", expect_rc=1)

    # A family sft_lm cannot start from fails in one line saying which it can, before any work.
    assert data["//exp:gpt2_sft"]["reason"] == (
        "model: its config.json says model_type 'gpt2'; sft_lm fine-tunes Llama (llama), Mixtral (mixtral), "
        "Qwen 2 (qwen2), OLMo 2 (olmo2)"
    )
    assert "Traceback" not in data["stderr"]
    failed = {label for label, item in data.items() if label != "stderr" and item["status"] != "built"}
    assert failed == {"//exp:gpt2_sft"}

    # Each learns to answer, as the model it started from: its family and architecture.
    for name, base in (("moe_sft", "moe"), ("moe_lora", "moe"), ("qwen_sft", "qwen"), ("olmo2_sft", "olmo2")):
        summary = _read(data, f"//exp:{name}", "summary.json")
        assert summary["eval_loss"] < summary["initial_eval_loss"] - 0.1, (name, summary)
        assert (
            _read(data, f"//exp:{name}", "model.json")["model"] == _read(data, f"//exp:{base}", "model.json")["model"]
        ), name
    # The fine-tuned Mixtral exports as a Mixtral, its experts trained.
    config = json.loads((Path(data["//exp:moe_sft_hf"]["output"]) / "config.json").read_text())
    assert (config["model_type"], config["num_local_experts"], config["num_experts_per_tok"]) == ("mixtral", 4, 2)


# A Hugging Face checkpoint as transformers writes one (a Hub model's form): a random tiny
# Llama, saved by PyTorch in a process of its own (the steps never import torch).
RANDOM_LLAMA = """
import sys, torch
from transformers import LlamaConfig, LlamaForCausalLM
torch.manual_seed(0)
config = LlamaConfig(vocab_size=int(sys.argv[2]), hidden_size=32, intermediate_size=128, num_hidden_layers=1,
                     num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
LlamaForCausalLM(config).save_pretrained(sys.argv[1])
"""


def _hf_checkpoint(directory: Path, texts: list[str]) -> Path:
    tokenizer = _tokenizer(directory, texts)
    env = {name: value for name, value in cli_env().items() if name != "USE_TORCH"}
    vocabulary = json.loads((tokenizer / "tokenizer.json").read_text())["model"]["vocab"]
    done = subprocess.run(
        [sys.executable, "-c", RANDOM_LLAMA, str(directory), str(len(vocabulary))],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return directory


def test_a_killed_lora_run_resumes_from_its_last_checkpoint(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    texts = [line for path in sorted(stdlib_inputs({}).values())[:40] for line in path.read_text().splitlines()]
    _hf_checkpoint(ws / "exp" / "base", texts)
    trainer = '{"steps": 100, "batch_size": 2, "eval_interval": 1000, "checkpoint_interval": 10, "max_eval_batches": 1}'
    (ws / "exp" / "BUILD.marin").write_text(
        f"""
filegroup(name = "files", srcs = glob(["base/*"]))
hf_model(name = "base", dir = ":files")
chat_data(name = "chats", sample_count = 200, answer_characters = 100)
sft_lm(name = "sft", model = ":base", data = ":chats", trainer = {trainer}, lora = {{"r": 2}})
"""
    )
    (ws / "marinbuild.toml").write_text(CONFIG)
    _build(ws, "//exp:base", "//exp:chats")

    build = start_to_kill(ws, "build", "//exp:sft")
    try:  # killed once the second checkpoint is saved: the first one's step is logged by then
        wait_for_checkpoint(ws / "cache" / "scratch", build, at_least=19)
    finally:
        os.killpg(build.pid, signal.SIGKILL)
        build.wait()

    data = _build(ws, "//exp:sft")
    assert data["//exp:sft"]["status"] == "built"
    rc, out, err = run_cli(ws, "show", "--json", "//exp:sft")
    assert rc == 0, err
    measured = json.loads(out)["measured"]
    resumed = measured["resumed_from_step"]
    assert resumed is not None and resumed >= 9
    assert measured["first_step_trained"] == resumed + 1 and measured["steps_trained"] == 99 - resumed
    output = Path(data["//exp:sft"]["output"])
    rows = [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == list(range(100))
    assert {path.name for path in (output / "checkpoint").iterdir()} == {"metadata.json", "model"}  # merged
    # Its adapters came back from the checkpoint over the base's weights: trained again from
    # the recipe, uninterrupted, the run ends with the same metrics.
    rc, out, err = run_cli(ws, "rerun", "--check", data["//exp:sft"]["key"], timeout=BUILD_TIMEOUT_S)
    assert rc == 0 and "matches the stored output (metrics)" in out, out + err


def _chat_set(root: Path, split_chats: dict[str, list[list[dict[str, str]]]]) -> Path:
    for split, chats in split_chats.items():
        (root / split).mkdir(parents=True)
        lines = "".join(json.dumps({MESSAGES: messages}) + "\n" for messages in chats)
        (root / split / "shard-00000.jsonl").write_text(lines)
    return root


def _tokenizer(directory: Path, texts: list[str]) -> Path:
    """A byte-level BPE tokenizer trained on `texts`, with bos/eos/pad tokens (as bpe_tokenizer's)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    special = ["<|bos|>", "<|eos|>", "<|pad|>"]
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token=special[0], eos_token=special[1], pad_token=special[2]
    )
    fast.save_pretrained(str(directory))
    return directory


def test_the_loss_counts_the_assistants_tokens_and_no_prompt_token(tmp_path: Path) -> None:
    import haliax as hax
    from levanter.data.text import ChatLmDatasetFormat
    from transformers import AutoTokenizer

    from rules.common.levanter.data import data_config
    from rules.posttrain.sft_lm import chat_caches

    # Multi-turn conversations (a class and its methods) and single ones, one with a system turn.
    sources = stdlib_inputs({})
    chats = [
        *conversations("json.encoder", sources["json/encoder.py"].read_text(), 200, 2),
        *conversations("json", sources["json/__init__.py"].read_text(), 200, 2),
    ]
    chats.append([{"role": "system", "content": "Answer briefly."}, *chats[0]])
    assert max(len(messages) for messages in chats) == 6 and all(chat_problem({MESSAGES: c}) is None for c in chats)
    data = _chat_set(tmp_path / "chats", {"train": chats, "validation": chats[:2]})
    texts = [message["content"] for messages in chats for message in messages]
    tokenizer_dir = _tokenizer(tmp_path / "tokenizer", texts)
    chat_format = ChatLmDatasetFormat(chat_template=DEFAULT_CHAT_TEMPLATE)
    caches = chat_caches({"//t:chats": str(data)}, tokenizer_dir, chat_format, 256, tmp_path / "caches")
    dataset = data_config(caches, {"chats": 1.0}, tokenizer_dir, chat_format)

    # The examples sft_lm trains on: conversations packed into 256-token sequences, shuffled.
    [train] = dataset.train_sets(hax.Axis("position", 256), key=jax.random.PRNGKey(0)).values()
    examples = train.as_sync_dataset()
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    counted: list[str] = []
    prompt_targets = 0
    for index in range(len(examples)):
        example = examples[index]
        tokens, mask = np.asarray(example.tokens.array), np.asarray(example.loss_mask.array)
        segments = np.asarray(example.attn_mask.segment_ids[0].array)
        for segment in sorted(set(segments.tolist()) - {-1}):
            positions = np.flatnonzero((segments == segment) & (mask > 0))
            counted.append(tokenizer.decode(tokens[positions + 1].tolist()))
            inside = np.flatnonzero(segments == segment)[:-1]
            prompt_targets += int(np.sum(mask[inside] == 0))
    # What the loss counts, conversation by conversation, is exactly what the assistant says
    # (and the end of its turns): no token of a system or user turn, nor of the template's.
    expected = ["".join(m["content"] + "<|eos|>" for m in messages if m["role"] == ASSISTANT) for messages in chats]
    assert sorted(counted) == sorted(expected)
    assert prompt_targets > sum(len(messages) for messages in chats)  # the prompts were there, uncounted


def test_chat_data_is_conversations_from_the_standard_library(make_workspace) -> None:
    ws = make_workspace(
        {"c/BUILD.marin": 'chat_data(name = "chats", system = "Answer briefly.", validation_fraction = 0.05)\n'},
        config=CONFIG,
    )
    data = build_json(ws, "//c:chats")
    out = Path(data["by_label"]["//c:chats"]["output"])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["documents"]["validation"] > 0 and summary["documents"]["train"] > 1000, summary
    chats = [json.loads(line)[MESSAGES] for line in (out / "train" / "shard-00000.jsonl").read_text().splitlines()]
    assert all(chat_problem({MESSAGES: messages}) is None for messages in chats)
    assert all(messages[0] == {"role": "system", "content": "Answer briefly."} for messages in chats)
    asked = {messages[1]["content"]: messages[2]["content"] for messages in chats}
    assert asked["What does the function json.dumps do?"] == "Serialize ``obj`` to a JSON formatted ``str``."
    encoder = next(
        messages for messages in chats if messages[1]["content"] == "What does the class json.encoder.JSONEncoder do?"
    )
    assert [m["content"] for m in encoder[3::2]] == [
        "And its method JSONEncoder.default?",
        "And its method JSONEncoder.encode?",
    ]
    assert set(statuses(build_json(ws, "//c:chats")).values()) == {"cached"}


def test_sft_lm_attributes_are_checked_at_load(make_workspace) -> None:
    sft = 'sft_lm(name = "m", model = ":d", data = ":d", trainer = {"steps": 4}'
    cases = [
        (sft + ', lora = {"r": 0})', "attribute 'lora': field 'r': expected >= 1, got 0"),
        (sft + ', lora = {"rank": 4})', "attribute 'lora': unknown field 'rank'"),
        (sft + ', lora = {"alpha": 0})', "attribute 'lora': field 'alpha': expected > 0, got 0.0"),
        (sft + ', lora = {"alpha": -8.0})', "attribute 'lora': field 'alpha': expected > 0, got -8.0"),
        (sft + ', lora = {"dropout": 1.0})', "attribute 'lora': field 'dropout': expected in [0, 1), got 1.0"),
        (sft + ', lora = {"dropout": -0.1})', "attribute 'lora': field 'dropout': expected in [0, 1), got -0.1"),
        (sft + ', lora = {"target_modules": ".*"})', "lora: target_modules matches lm_head"),
        (sft + ', lora = {"target_modules": ".*c_attn"})', "lora: target_modules '.*c_attn' matches none"),
        (sft + ', lora = {"target_modules": "("})', "lora: target_modules is not a regex"),
        (sft + ', chat_template = "{{ messages }}")', "chat_template marks no assistant tokens"),
        (sft + ", seq_len = 1)", "attribute 'seq_len': expected >= 2 (a token and the next), got 1"),
        # The optimizer and the trainer are train_lm's: the same ranges, the same schedule.
        (
            'sft_lm(name = "m", model = ":d", data = ":d", trainer = {"steps": 1})',
            "attribute 'trainer': field 'steps': expected >= 2 (Levanter never checkpoints its step 0), got 1",
        ),
        (sft + ', optimizer = {"learning_rate": -3e-3})', "attribute 'optimizer': field 'learning_rate': expected > 0"),
        (sft + ', optimizer = {"beta1": 1.5})', "attribute 'optimizer': field 'beta1': expected in [0, 1), got 1.5"),
        (
            sft + ', optimizer = {"warmup": 8})',
            "optimizer: warmup (8: 8 steps) takes more than the run's 4 steps (trainer: steps)",
        ),
        ('chat_data(name = "m", follow_ups = -1)', "follow_ups must be 0 or more"),
    ]
    assert_bad_declarations(make_workspace, cases, config=CONFIG)


def test_the_lora_schema_matches_levanters_and_adapts_every_linear_layer_but_the_head() -> None:
    import dataclasses

    import equinox as eqx
    import haliax as hax
    import haliax.nn as hnn
    from levanter.lora import LoraConfig, LoraLinear, loraize
    from levanter.models.llama import LlamaConfig
    from levanter.utils.jax_utils import leaf_key_paths

    from rules.posttrain.decls import LLAMA_LINEAR_PATHS, LORA_FIELDS

    theirs = {field.name: field for field in dataclasses.fields(LoraConfig)}
    assert {field.name for field in LORA_FIELDS} == set(theirs)
    ours = {field.name: field.default for field in LORA_FIELDS}
    assert {name: ours[name] for name in ("r", "alpha", "dropout")} == {
        name: theirs[name].default for name in ("r", "alpha", "dropout")
    }

    # Levanter's own default (None: every linear layer) would adapt lm_head too; ours, on
    # the model Levanter builds, adapts each linear layer of the blocks and not the head.
    config = LlamaConfig(seq_len=16, hidden_dim=16, intermediate_dim=32, num_layers=2, num_heads=2, num_kv_heads=2)

    def adapted() -> object:
        key = jax.random.PRNGKey(0)
        model = config.build(hax.Axis("vocab", 64), key=key)
        return loraize(model, LoraConfig(r=2, target_modules=ours["target_modules"]), key=key)

    model = eqx.filter_eval_shape(adapted)
    is_linear = lambda node: isinstance(node, (hnn.Linear, LoraLinear))  # noqa: E731
    kinds: dict[str, str] = {}
    jax.tree_util.tree_map(
        lambda node, path: kinds.update({path: type(node).__name__}) if is_linear(node) else None,
        model,
        leaf_key_paths(model, is_leaf=is_linear),
        is_leaf=is_linear,
    )
    assert kinds == {**dict.fromkeys(LLAMA_LINEAR_PATHS, "LoraLinear"), "lm_head": "Linear"}
