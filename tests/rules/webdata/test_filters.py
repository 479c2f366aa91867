"""Document filters: each rejects a document built to break its rule, with that rule's
reason, and keeps a clean one; bad parameters are clear errors; the chain's counts add up.

The language filter runs a real fastText model, trained here in a second from text every
machine has: the standard library's reference docs (English) and humanize's translations.
"""

from __future__ import annotations

import random
import re
import string
import subprocess
import sys

import pytest

from marinbuild.targets.attrs import AttrError
from marinbuild.targets.context import StepFailed
from rules.webdata.blocks.documents import Document
from rules.webdata.blocks.filters.c4 import C4Quality
from rules.webdata.blocks.filters.chain import FILTERS, FilterChain, Rejection, make_filter
from rules.webdata.blocks.filters.gopher import GopherQuality, GopherRepetition
from rules.webdata.blocks.filters.scores import Language
from rules.webdata.blocks.raw_corpus.pool import Pool

CLEAN = "\n".join(
    [
        "The standard library of Python ships with modules for most everyday tasks.",
        "A module is a file of definitions and statements that other programs can import.",
        "When a program imports a module, the interpreter runs it once and keeps the result.",
        "Packages group related modules together in a directory with a special file.",
        "The documentation of each module explains what it offers and how to use it well.",
        "Reading that documentation carefully saves time when something does not work.",
        "Many modules have been part of the language for decades and are very stable.",
    ]
)
STOP_WORDS = {"the", "be", "to", "of", "and", "that", "have", "with"}


def doc(text: str, **metadata: object) -> Document:
    return Document(text=text, id="d", metadata=metadata)


def _without_stop_words(text: str) -> str:
    return " ".join(word for word in text.split() if word.strip(string.punctuation).lower() not in STOP_WORDS)


def _distinct_words(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(4, 8))) for _ in range(count)]


LINES = CLEAN.split("\n")
PHRASE = " ".join(_distinct_words(20, 1))

BROKEN = [
    # Gopher quality: one document per rule.
    (GopherQuality(), "\n".join(LINES[:2]), "too few words"),
    (GopherQuality(), CLEAN + "\n" + " ".join(f"w{i}" for i in range(100_001)), "too many words"),
    (GopherQuality(), " ".join(["a", "is", "of", "to", "it", "the"] * 10), "mean word length out of range"),
    (GopherQuality(), CLEAN + " " + " ".join(["#python"] * 20), "too many symbols"),
    (GopherQuality(), "\n".join("• " + line for line in LINES), "too many bullet lines"),
    (GopherQuality(), "\n".join(line[:-1] + "..." if i % 2 else line for i, line in enumerate(LINES)),
     "too many ellipsis lines"),
    (GopherQuality(), CLEAN + " " + " ".join(str(1000 + i) for i in range(100)), "too few alphabetic words"),
    (GopherQuality(), _without_stop_words(CLEAN), "too few stop words"),
    # C4: the page-level rules, and too little left once lines are cleaned.
    (C4Quality(), CLEAN + "\nLorem ipsum dolor sit amet, consectetur adipiscing elit.", "lorem ipsum"),
    (C4Quality(), CLEAN + "\nFormat it with the call {name} in a string of your own.", "curly bracket"),
    (C4Quality(bad_words=("Darn",)), CLEAN + "\nWhat a darn shame that this module was removed.", "bad word"),
    (C4Quality(), "Too short.\nAlso short here.\n" + LINES[0], "too few sentences"),
    (C4Quality(), "\n".join(line[:-1] for line in LINES), "too few sentences"),  # no line ends a sentence
    # Gopher repetition, in the order its rules are checked.
    (GopherRepetition(), "\n\n".join([CLEAN, "Thanks for reading.", "Thanks for reading."]), "duplicate paragraphs"),
    (GopherRepetition(), "\n\n".join([PHRASE + " " + CLEAN, "One more.", "Two more.", "Three.", PHRASE + " " + CLEAN]),
     "duplicate paragraph characters"),
    (GopherRepetition(), "\n".join(LINES + LINES[:4]), "duplicate lines"),
    (GopherRepetition(), "\n".join(LINES + [CLEAN.replace("\n", " ")] * 2), "duplicate line characters"),
    (GopherRepetition(), "\n".join(f"Line {i} says big data, big data, big data matters." for i in range(8)),
     "top 2-gram"),
    (GopherRepetition(top_ngrams=((3, 0.18),)), "\n".join(f"{w} one two three {w}." for w in _distinct_words(12, 2)),
     "top 3-gram"),
    (GopherRepetition(), "\n".join([f"First {PHRASE}.", CLEAN, f"Again {PHRASE}!"]), "duplicate 5-grams"),
]  # fmt: skip


@pytest.mark.parametrize(("the_filter", "text", "reason"), BROKEN, ids=[reason for _, _, reason in BROKEN])
def test_a_document_breaking_one_rule_is_rejected_with_that_rule(the_filter, text, reason) -> None:
    assert the_filter.apply(doc(text)) == reason


@pytest.mark.parametrize("the_filter", [GopherQuality(), C4Quality(), GopherRepetition()], ids=lambda f: f.name)
def test_a_clean_document_is_kept_as_it_is(the_filter) -> None:
    assert the_filter.apply(doc(CLEAN)) == doc(CLEAN)


def test_c4_keeps_only_the_lines_it_keeps_and_removes_citation_markers() -> None:
    text = "\n".join(
        [
            LINES[0],
            "Home | Library | About",  # no terminal punctuation
            "Please enable JavaScript to see the comments below.",
            "Read our privacy policy to learn more about this site.",
            "Too few words here.",
            LINES[1].replace("import.", "import [1]."),
            LINES[2] + " [citation needed]",
            LINES[3],
        ]
    )
    kept = C4Quality().apply(doc(text))
    assert isinstance(kept, Document)
    assert kept.text == "\n".join([LINES[0], LINES[1].replace("import.", "import ."), LINES[2], LINES[3]])


# -- the language filter, with a fastText model trained here ------------------------------------


def _translated(phrases: tuple[str, ...]) -> list[str]:
    """Lines of four phrases each, their placeholders (`%d`, `%s`) filled with a number."""
    filled = [re.sub(r"%(?:\(\w+\))?[ds]", "3", phrase) for phrase in phrases]
    return [" ".join(filled[at : at + 4]) for at in range(0, len(filled), 4)]


@pytest.fixture(scope="module")
def pool() -> Pool:
    return Pool.load(0)


@pytest.fixture(scope="module")
def language_model(tmp_path_factory, pool) -> str:
    import fasttext

    lines = [f"__label__en {passage.text}" for passage in pool.prose[:100]]
    for locale, phrases in pool.translations:
        lines += [f"__label__{locale.split('_')[0]} {line}" for line in _translated(phrases)]
    random.Random(0).shuffle(lines)
    directory = tmp_path_factory.mktemp("lid")
    (directory / "train.txt").write_text("\n".join(lines) + "\n")
    # A 32 MiB input matrix (bucket x dim): one thread draws only its first tenth, and only a
    # matrix that large is surely zeroed memory for the rest (rules/webdata/blocks/quality.py).
    model = fasttext.train_supervised(
        str(directory / "train.txt"), epoch=25, lr=0.5, dim=16, minn=2, maxn=4, bucket=2**19, thread=1, verbose=0
    )
    model.save_model(str(directory / "lid.bin"))
    return str(directory / "lid.bin")


def test_the_language_filter_keeps_english_with_its_score_and_rejects_other_languages(language_model, pool) -> None:
    english = Language(model=language_model).apply(doc(CLEAN, source="a.warc"))
    assert isinstance(english, Document)
    assert english.metadata["language"] == "en" and english.metadata["source"] == "a.warc"
    assert 0.65 <= english.metadata["language_score"] <= 1.0 + 1e-4
    german = " ".join(_translated(dict(pool.translations)["de_DE"]))
    assert Language(model=language_model).apply(doc(german)) == "other language"
    # German is close to Dutch and the Scandinavian languages: a tiny model is sure of little else.
    kept = Language(model=language_model, languages=("en", "de"), threshold=0.0).apply(doc(german))
    assert isinstance(kept, Document) and kept.metadata["language"] == "de"


def test_the_language_filter_rejects_a_score_under_its_threshold(language_model) -> None:
    score = Language(model=language_model).apply(doc(CLEAN)).metadata["language_score"]
    assert Language(model=language_model, threshold=min(1.0, score + 1e-4)).apply(doc(CLEAN)) == (
        "language score below threshold"
    )


def test_a_missing_language_model_fails_the_step_naming_the_file(tmp_path) -> None:
    with pytest.raises(StepFailed, match="cannot load the fastText language model .*missing.bin"):
        Language(model=str(tmp_path / "missing.bin")).apply(doc(CLEAN))


# -- parameters ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "message", "hint"),
    [
        (
            {"name": "gopher_qualty"},
            "unknown filter 'gopher_qualty': the filters are gopher_quality, c4_quality, gopher_repetition, language,",
            "did you mean 'gopher_quality'",
        ),
        (
            {"name": "gopher_quality", "min_word": 10},
            "filter 'gopher_quality' has no parameter 'min_word': its parameters are min_words, max_words,",
            "did you mean 'min_words'",
        ),
        ({"name": "gopher_quality", "min_words": "ten"}, "'min_words' must be an int, got 'ten'", None),
        ({"name": "gopher_quality", "min_words": True}, "'min_words' must be an int, got True", None),
        ({"name": "c4_quality", "bad_words": "darn"}, "'bad_words' must be a list of strings, got 'darn'", None),
        ({"name": "gopher_quality", "min_words": 500, "max_words": 100}, "need 0 <= min_words <= max_words", None),
        ({"name": "gopher_repetition", "top_ngrams": [[2]]}, "must be a list of [int, number] pairs", None),
        ({"name": "gopher_repetition", "top_ngrams": [[2, 1.5]]}, "with n >= 1 and 0 <= share <= 1", None),
        ({"name": "gopher_repetition", "max_duplicate_lines": -0.1}, "'max_duplicate_lines' must be between 0", None),
        ({"name": "language"}, "'model' (the fastText model file) is required", None),
        ({"name": "language", "model": "lid.bin", "languages": ["en us"]}, "must be language codes", None),
        ({"filter": "language"}, "a filter is a dict with a 'name'", None),
    ],
)
def test_a_bad_filter_spec_is_an_error_naming_what_is_valid(spec, message, hint) -> None:
    with pytest.raises(AttrError) as raised:
        make_filter(spec)
    assert message in str(raised.value)
    assert hint is None or hint in raised.value.hint


def test_a_spec_gives_the_filter_back_with_every_parameter() -> None:
    made = make_filter({"name": "gopher_repetition", "max_duplicate_lines": 1, "top_ngrams": [[2, 0.3]]})
    assert made == GopherRepetition(max_duplicate_lines=1.0, top_ngrams=((2, 0.3),))
    assert isinstance(made.max_duplicate_lines, float)  # 1 and 1.0 are one recipe
    as_json = made.to_json()
    assert as_json["top_ngrams"] == [[2, 0.3]] and as_json["max_duplicate_paragraphs"] == 0.3
    assert make_filter(as_json) == made
    assert set(FILTERS) == {"gopher_quality", "c4_quality", "gopher_repetition", "language", "quality_threshold"}


# -- the chain ------------------------------------------------------------------------------------


def test_the_chain_yields_kept_documents_and_rejections_and_its_counts_add_up() -> None:
    chain = FilterChain.from_specs([{"name": "gopher_quality"}, {"name": "c4_quality"}, {"name": "gopher_repetition"}])
    documents = [
        Document(CLEAN, "clean"),
        Document("\n".join(LINES[:2]), "short"),
        Document(CLEAN + "\nLorem ipsum dolor sit amet, consectetur adipiscing elit.", "lorem"),
        Document(CLEAN + "\nHome | About", "menu"),
        Document("\n".join(LINES + LINES[:4]), "repeated"),
        Document(_without_stop_words(CLEAN), "no stop words"),
    ]
    out = list(chain.run(documents))
    kept = [d for d in out if isinstance(d, Document)]
    rejected = [(r.document.id, r.filter, r.reason) for r in out if isinstance(r, Rejection)]
    assert [d.id for d in kept] == ["clean", "menu"]
    assert kept[1].text == CLEAN  # c4 dropped the menu line
    assert rejected == [
        ("short", "gopher_quality", "too few words"),
        ("lorem", "c4_quality", "lorem ipsum"),
        ("repeated", "gopher_repetition", "duplicate lines"),
        ("no stop words", "gopher_quality", "too few stop words"),
    ]
    summary = chain.to_json()
    assert (summary["documents"], summary["kept"], summary["rejected"]) == (6, 2, 4)
    counts = [(f["name"], f["seen"], f["kept"], f["rejected"], f["reasons"]) for f in summary["filters"]]
    assert counts == [
        ("gopher_quality", 6, 4, 2, {"too few stop words": 1, "too few words": 1}),
        ("c4_quality", 4, 3, 1, {"lorem ipsum": 1}),
        ("gopher_repetition", 3, 2, 1, {"duplicate lines": 1}),
    ]
    assert summary["filters"][0]["min_words"] == 50  # each filter's parameters beside its counts


def test_making_filters_imports_no_fasttext() -> None:
    """BUILD files are loaded with the filters' specs checked: that must not import fastText."""
    code = (
        "import sys; from rules.webdata.blocks.filters.chain import make_filter; "
        "make_filter({'name': 'language', 'model': 'lid.bin'}); print('fasttext' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
