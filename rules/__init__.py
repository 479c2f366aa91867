"""The ML rules of marinbuild, one package per family: `data`, `webdata`, `tokenize`, `lm`,
`evals`, `posttrain`, `scaling`, `mixtures`, and `common`, what they share (with `common/levanter/`,
the Levanter runtime the language-model families run on).

In each family, `decls.py` declares its rules — what a BUILD author sees, and what a
workspace names in its settings (`rules = ["rules.lm.decls"]`) — and imports no ML library
at top level, since loading BUILD files imports it; `constants.py` holds the names its
declarations and its steps both read; every other module is a step or what a step runs,
imported when the step runs. Imports go one way: declarations to steps to constants, any
family to `common`, and one family to another's declarations and constants only.
"""

# Each rule module a workspace could name before the families, and where its rules are now:
# loading a workspace that still names one fails with a line naming the new module
# (marinbuild/packages/rule_modules.py).
MOVED_MODULES = {
    "rules.data": "rules.data.decls",
    "rules.tokenizer": "rules.tokenize.decls",
    "rules.token_caches": "rules.tokenize.decls",
    "rules.lm": "rules.lm.decls",
    "rules.hf_checkpoints": "rules.lm.decls",
    "rules.eval_harness": "rules.evals.decls",
    "rules.chat_data": "rules.posttrain.decls",
    "rules.sft": "rules.posttrain.decls",
    "rules.scaling": "rules.scaling.decls",
    "rules.webdata.local_sources": "rules.webdata.decls",
    "rules.webdata.extract_text": "rules.webdata.decls",
    "rules.webdata.filter_text": "rules.webdata.decls",
    "rules.webdata.fasttext_train": "rules.webdata.decls",
    "rules.webdata.quality_rules": "rules.webdata.decls",
    "rules.webdata.dedup_rule": "rules.webdata.decls",
}
