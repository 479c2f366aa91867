"""The quality classifier: a real fastText model, trained here in a few seconds on text every
machine has (paragraphs of the standard library's reference docs against random lists of
links), separates held-out documents of both kinds, is the same model file when trained
again, and its scores are kept per document; the top-fraction cut from per-shard
histograms keeps what it should on known scores.
"""

from __future__ import annotations

import math
import random
import subprocess
import sys

import pytest

from marinbuild.targets.attrs import AttrError
from marinbuild.targets.context import StepFailed
from marinbuild.targets.distributions import Distribution, distributions
from rules.webdata.blocks.documents import Document
from rules.webdata.blocks.fasttext import one_line
from rules.webdata.blocks.filters.chain import make_filter
from rules.webdata.blocks.filters.scores import QualityThreshold
from rules.webdata.blocks.quality import QualityHyperparameters, QualityScorer, top_fraction_cut, train_classifier
from rules.webdata.blocks.raw_corpus.pool import Pool
from rules.webdata.blocks.score_distribution import BINS, distribution, score_histogram, score_range

SMALL = QualityHyperparameters(epoch=10, dim=16, bucket=2**19)  # the smallest deterministic matrix


def _docs_pages(pool: Pool, count: int, offset: int) -> list[Document]:
    """Documents of three consecutive reference-docs paragraphs each."""
    prose = pool.prose[offset * 3 : (offset + count) * 3]
    return [
        Document("\n\n".join(p.text for p in prose[i : i + 3]), f"docs-{offset + i // 3}")
        for i in range(0, len(prose), 3)
    ]


def _link_lists(pool: Pool, count: int, seed: int) -> list[Document]:
    """Pages of 20 links to random sources, as a site's index or a spam page lists them."""
    rng = random.Random(seed)
    sources = sorted({p.source for p in pool.prose})
    pages = []
    for number in range(count):
        links = [
            f"{rng.choice(['Read more', 'See also', 'Related', 'Top post'])}: {rng.choice(sources)}" for _ in range(20)
        ]
        pages.append(Document("\n".join(links), f"links-{seed}-{number}"))
    return pages


@pytest.fixture(scope="module")
def pool() -> Pool:
    return Pool.load(0)


@pytest.fixture(scope="module")
def classifier(tmp_path_factory, pool):
    work = tmp_path_factory.mktemp("quality")
    trained = train_classifier(
        _docs_pages(pool, 120, 0), _link_lists(pool, 120, 0), SMALL, work / "model.bin", work / "train"
    )
    return work / "model.bin", trained


def test_the_classifier_separates_held_out_docs_from_link_lists(classifier, pool) -> None:
    model, trained = classifier
    assert (trained.positive, trained.negative) == (120, 120) and trained.training_precision > 0.95
    scorer = QualityScorer(model)
    good = [scorer.score(d.text) for d in _docs_pages(pool, 60, 120)]  # paragraphs not trained on
    bad = [scorer.score(d.text) for d in _link_lists(pool, 60, 1)]
    assert sum(score > 0.5 for score in good) >= 57 and sum(score < 0.5 for score in bad) >= 57, (good, bad)
    assert min(good + bad) >= 0.0 and max(good + bad) <= 1.0


def test_training_again_gives_the_same_model_file_and_another_seed_another(classifier, pool, tmp_path) -> None:
    model, _ = classifier
    positive, negative = _docs_pages(pool, 120, 0), _link_lists(pool, 120, 0)
    train_classifier(positive, negative, SMALL, tmp_path / "again.bin", tmp_path / "again")
    assert (tmp_path / "again.bin").read_bytes() == model.read_bytes()
    other = QualityHyperparameters(**{**SMALL.to_json(), "seed": 2})
    train_classifier(positive, negative, other, tmp_path / "other.bin", tmp_path / "other")
    assert (tmp_path / "other.bin").read_bytes() != model.read_bytes()


def test_the_training_file_interleaves_the_sets_in_proportion_on_one_line_each(tmp_path) -> None:
    positive = [Document(f"Good\ndocument {n}.", f"p{n}") for n in range(2)]
    negative = [Document(f"bad {n}", f"n{n}") for n in range(4)] + [Document(" \n ", "blank")]
    trained = train_classifier(positive, negative, SMALL, tmp_path / "m.bin", tmp_path / "work")
    lines = (tmp_path / "work" / "train.txt").read_text().splitlines()
    assert lines == [
        "__label__hq Good document 0.", "__label__lq bad 0", "__label__lq bad 1",
        "__label__hq Good document 1.", "__label__lq bad 2", "__label__lq bad 3",
    ]  # fmt: skip
    assert (trained.positive, trained.negative) == (2, 4)  # the blank document left out
    assert one_line("  a\n\nb\tc ") == "a b c"


def test_a_set_with_no_text_fails_the_step(tmp_path) -> None:
    with pytest.raises(StepFailed, match="the negative set of the quality classifier has no document with text"):
        train_classifier([Document("some text", "p")], [Document("", "n")], SMALL, tmp_path / "m.bin", tmp_path / "w")


def test_a_document_keeps_its_score_and_its_metadata(classifier) -> None:
    model, _ = classifier
    scorer = QualityScorer(model)
    document = Document("Read more: os\nSee also: sys", "d", metadata={"language": "en"})
    scored = scorer.annotate(document)
    assert scored.metadata == {"language": "en", "quality_score": scorer.score(document.text)}
    assert QualityScorer(model, field="hq").annotate(document).metadata["hq"] == scored.metadata["quality_score"]


def test_a_missing_quality_model_fails_the_step_naming_the_file(tmp_path) -> None:
    with pytest.raises(StepFailed, match="cannot load the fastText quality model .*missing.bin"):
        QualityScorer(tmp_path / "missing.bin").score("text")


# -- keeping the best ---------------------------------------------------------------------------


def test_the_threshold_filter_keeps_scores_at_or_above_it() -> None:
    keep = QualityThreshold(threshold=0.75)
    assert keep.apply(Document("t", "a", metadata={"quality_score": 0.75})).id == "a"
    assert keep.apply(Document("t", "b", metadata={"quality_score": 0.7})) == "quality below threshold"
    assert keep.apply(Document("t", "c")) == "no quality score"
    assert keep.apply(Document("t", "d", metadata={"quality_score": True})) == "no quality score"
    assert make_filter({"name": "quality_threshold", "threshold": 1}) == QualityThreshold(threshold=1.0)


def test_the_top_fraction_cut_over_shards_keeps_that_fraction_of_known_scores() -> None:
    scores = [i / 1000 for i in range(1, 1001)]
    random.Random(0).shuffle(scores)
    histograms = [score_histogram(scores[at : at + 300]) for at in range(0, 1000, 300)]  # four shards
    assert [int(h.sum()) for h in histograms] == [300, 300, 300, 100] and len(histograms[0]) == BINS
    for fraction, kept in ((0.1, 100), (0.3, 300), (0.999, 999), (1.0, 1000), (0.0005, 1)):
        cut = top_fraction_cut(histograms, fraction)
        keep = QualityThreshold(threshold=cut)
        survivors = [
            s for s in scores if isinstance(keep.apply(Document("t", "d", metadata={"quality_score": s})), Document)
        ]
        assert len(survivors) == kept, (fraction, cut)
        assert min(survivors) == pytest.approx(1 - (kept - 1) / 1000)


def test_the_top_fraction_cut_keeps_the_ties_of_its_bin() -> None:
    histograms = [score_histogram([0.9] * 10 + [0.1] * 90), score_histogram([1.0])]
    cut = top_fraction_cut(histograms, 0.05)
    assert 0.1 < cut <= 0.9  # the five needed are tied at 0.9 with five more: all ten kept
    assert top_fraction_cut(histograms, 0.005) == (BINS - 1) / BINS  # 1.0 alone, in the last bin
    assert top_fraction_cut([score_histogram([])], 0.5) == 0.0


def test_shards_histograms_added_up_give_the_distribution_of_every_score() -> None:
    rng = random.Random(0)
    scores = [rng.betavariate(8, 3) for _ in range(1000)] + [1.0, 0.0]
    parts = [scores[at : at + 170] for at in range(0, len(scores), 170)]
    merged = distribution("s", map(score_histogram, parts), map(score_range, parts), 0.75, 600)
    assert merged == distribution("s", [score_histogram(scores)], [score_range(scores)], 0.75, 600)
    assert merged is not None and (merged.count, merged.minimum, merged.maximum) == (1002, 0.0, 1.0)
    ordered = sorted(scores)
    for fraction, value in merged.quantiles:  # the nearest rank's value, to half a bin
        assert abs(value - ordered[math.ceil(fraction * len(scores)) - 1]) <= 0.5 / BINS
    assert sum(merged.counts) == 1002 and len(merged.counts) <= 64 and merged.edges[0] == 0 and merged.edges[-1] == 1
    assert Distribution.from_json(merged.to_json()) == merged
    narrow = distribution("s", [score_histogram([0.5, 0.50013])], [score_range([0.5, 0.50013])], 0.5, 2)
    assert narrow is not None and narrow.edges[0] <= 0.5 < 0.50013 < narrow.edges[-1] and len(narrow.counts) <= 64
    assert narrow.warning() == "the threshold 0.5 on s keeps all of 2 (they lie in 0.50000–0.50013)"
    assert distribution("s", [score_histogram([])], [score_range([])], 0.5, 0) is None


def test_a_summary_field_not_of_the_shape_is_no_distribution() -> None:
    assert distributions({"loss": 2.5}) is None and distributions({"distributions": []}) is None
    assert distributions({"distributions": [{"name": "s", "count": 2}]}) is None


def test_a_bad_fraction_is_an_error() -> None:
    with pytest.raises(AttrError, match="must be above 0 and at most 1, got 0"):
        top_fraction_cut([score_histogram([0.5])], 0)


@pytest.mark.parametrize(
    ("spec", "message", "hint"),
    [
        ({"epoch": 0}, "quality classifier: 'epoch' must be at least 1", None),
        ({"lr": 0}, "'lr' must be above 0 and at most 10, got 0.0", None),
        ({"dim": 2.5}, "'dim' must be an int, got 2.5", None),
        ({"bucket": 0}, "'bucket' must be at least 1", None),
        ({"dim": 16, "bucket": 2**18}, "need word_ngrams >= 2 and bucket x dim >= 8,388,608", None),
        ({"word_ngrams": 1}, "got 1 and 2000000 x 100: fastText on one thread initialises a tenth", None),
        ({"seed": 2**31}, "'seed' must be between 1 and 2**31 - 1", None),
        ({"seed": 0}, "(fastText's 0 is its 1), got 0", None),
        ({"wordNgrams": 2}, "quality classifier has no parameter 'wordNgrams'", "'word_ngrams'"),
    ],
)
def test_bad_hyperparameters_are_errors_naming_what_is_valid(spec, message, hint) -> None:
    with pytest.raises(AttrError) as raised:
        QualityHyperparameters.from_spec(spec)
    assert message in str(raised.value)
    assert hint is None or hint in raised.value.hint


def test_hyperparameters_give_back_every_value() -> None:
    made = QualityHyperparameters.from_spec({"lr": 1, "dim": 32})
    assert made.to_json() == {
        "epoch": 5, "lr": 1.0, "word_ngrams": 2, "dim": 32, "min_count": 1, "bucket": 2_000_000, "seed": 1,
    }  # fmt: skip
    assert QualityHyperparameters.from_spec(made.to_json()) == made


def test_checking_hyperparameters_imports_neither_numpy_nor_fasttext() -> None:
    code = (
        "import sys; from rules.webdata.blocks.quality import QualityHyperparameters; "
        "QualityHyperparameters.from_spec({'dim': 16, 'bucket': 2**19}); "
        "print('numpy' in sys.modules, 'fasttext' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False False"
