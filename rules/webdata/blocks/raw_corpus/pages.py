"""The pages of a raw corpus, each made on demand from (seed, page index) at the rates of
a `RawCorpusSpec`: originals drawn from the pool, their exact and near duplicates,
boilerplate, low-quality, non-English and malformed pages.

The pool holds about 5,000 distinct paragraphs (all the stdlib modules, Python 3.11) and
an original draws 3 to 8 of them. Drawn from those alone, a large corpus gives each
paragraph to hundreds of unrelated pages, and pages made mostly of one long shared
paragraph are 0.4-0.8 similar by chance (docs/benchmarks.md, bench/data.py run 1), which
real pages are not. So the paragraphs an original draws from grow with the corpus: page
n draws from POOL_PER_PAGE x (n + 1) of them (never fewer than the pool's, so a page is
the same in every corpus that holds it). Paragraph i is the pool's i mod P (P its size):
as it is for i < P, and otherwise with VARIANT_EDITS of its words replaced by others of
the pool, by a draw seeded by the seed and i, so two variants of one paragraph share
about 5% of their 5-word shingles. Two unrelated originals rarely share a paragraph (in
2,000 pages, a fifth of the paragraphs drawn are in two originals or more, against
nearly all drawn from the pool alone), and are never near duplicates by chance:
document-level copies are only the injected ones, and paragraph-level dedup still finds
repeats.
"""

from __future__ import annotations

import random
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import timedelta
from functools import cached_property

from rules.webdata.blocks.raw_corpus.pool import Passage, Pool
from rules.webdata.blocks.raw_corpus.sites import EPOCH, SITES, Content, Site, render, slug

KINDS = ("original", "exact_duplicate", "near_duplicate", "boilerplate", "low_quality", "non_english", "malformed")
LOW_QUALITY = ("link_list", "repeated_lines", "too_short", "lorem_ipsum")
MALFORMED = ("invalid_utf8", "empty_payload", "not_http", "binary_payload")
TRUNCATED = "truncated"
POOL_PER_PAGE = 64  # paragraphs an original draws from, a page of the corpus
VARIANT_EDITS = 0.25  # share of a pool paragraph's words its variants replace
_LOREM = (
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et "
    "dolore magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation ullamco laboris nisi ut aliquip ex "
    "ea commodo consequat."
)


@dataclass(frozen=True)
class RawCorpusSpec:
    """What to generate. Rates are shares of pages; what they leave is originals."""

    seed: int = 0
    pages: int = 1000
    exact_duplicate_rate: float = 0.05
    near_duplicate_rate: float = 0.05
    boilerplate_rate: float = 0.02
    low_quality_rate: float = 0.05
    non_english_rate: float = 0.02
    malformed_rate: float = 0.01
    near_duplicate_edits: float = 0.02  # share of an original's words a near duplicate changes
    pages_per_file: int = 1000
    truncate_last_record: bool = True
    stdlib_modules: int | None = None  # how many stdlib modules feed the pool (None: all; 0: the docs alone)

    def __post_init__(self) -> None:
        if self.pages < 1 or self.pages_per_file < 1:
            raise ValueError(f"pages and pages_per_file must be positive, got {self.pages} and {self.pages_per_file}")
        if self.stdlib_modules is not None and self.stdlib_modules < 0:
            raise ValueError(f"stdlib_modules must be None or at least 0, got {self.stdlib_modules}")
        shares = {name: getattr(self, name) for name in self.rate_names() + ("near_duplicate_edits",)}
        for name, share in shares.items():
            if not 0 <= share <= 1:
                raise ValueError(f"{name} must be between 0 and 1, got {share}")
        if sum(self.rates()) > 1:
            raise ValueError(f"the rates add up to {sum(self.rates())}, more than 1 (originals are the rest)")

    @staticmethod
    def rate_names() -> tuple[str, ...]:
        return tuple(f"{kind}_rate" for kind in KINDS[1:])

    def rates(self) -> tuple[float, ...]:
        """The share of each kind but `original`, in KINDS order."""
        return tuple(getattr(self, name) for name in self.rate_names())


@dataclass(frozen=True)
class Page:
    """One generated page: its WARC record's fields, its HTTP payload, and what is known of it.

    `main_text` is what a perfect extractor returns (title, paragraphs and code blocks,
    separated by blank lines); `boilerplate` the page's visible phrases that are neither
    main text nor its `byline` (the post's date and author), by which leakage is measured.
    `copy_of` is the index of the original a duplicate copies.
    """

    index: int
    kind: str
    detail: str
    url: str
    record_id: str
    date: str
    content_type: str
    payload: bytes
    main_text: str
    boilerplate: tuple[str, ...]
    byline: str = ""
    copy_of: int | None = None
    edits: int = 0


class RawCorpus:
    """The pages of one spec, each made on demand from (seed, index)."""

    def __init__(self, spec: RawCorpusSpec, pool: Pool | None = None):
        self.spec = spec
        self._pool = pool

    @cached_property
    def pool(self) -> Pool:
        return self._pool or Pool.load(self.spec.stdlib_modules)

    def _rng(self, purpose: str, index: int) -> random.Random:
        return random.Random(f"{self.spec.seed}/{purpose}/{index}")

    def kind(self, index: int) -> str:
        """The kind of page `index`: page 0 is an original, so every copy has one to copy."""
        if index == 0:
            return "original"
        draw = self._rng("kind", index).random()
        for kind, rate in zip(KINDS[1:], self.spec.rates()):
            if draw < rate:
                return kind
            draw -= rate
        return "original"

    def _source_of(self, index: int) -> int:
        """The earlier original a copy copies (page 0 when a few draws find none)."""
        rng = self._rng("source", index)
        for _ in range(64):
            candidate = rng.randrange(index)
            if self.kind(candidate) == "original":
                return candidate
        return 0

    @cached_property
    def _words(self) -> tuple[str, ...]:
        """The words of the pool's prose, in order, that variants of its paragraphs draw from."""
        return tuple(word for passage in self.pool.prose for word in passage.text.split())

    def _paragraph(self, draw: int) -> Passage:
        """Paragraph `draw` of the pool grown to the corpus (the module's docstring says why)."""
        prose = self.pool.prose
        base = prose[draw % len(prose)]
        if draw < len(prose):
            return base
        rng = self._rng("variant", draw)
        words = [rng.choice(self._words) if rng.random() < VARIANT_EDITS else word for word in base.text.split()]
        return Passage(base.source, " ".join(words))

    def _original(self, index: int) -> Content:
        rng = self._rng("content", index)
        paragraphs = max(len(self.pool.prose), POOL_PER_PAGE * (index + 1))
        blocks = [self._paragraph(rng.randrange(paragraphs)) for _ in range(rng.randint(3, 8))]
        if self.pool.code and rng.random() < 0.25:
            blocks.insert(rng.randint(1, len(blocks)), self.pool.code[rng.randrange(len(self.pool.code))])
        title = f"{blocks[0].source}: {' '.join(blocks[0].text.split()[:6])}"
        return Content(title, tuple(blocks))

    def _related(self, rng: random.Random, count: int = 6) -> list[str]:
        prose = self.pool.prose
        return [f"More on {prose[rng.randrange(len(prose))].source}" for _ in range(count)]

    def _edited(self, content: Content, rng: random.Random) -> tuple[Content, int]:
        """`content` with round(near_duplicate_edits x words) of its prose words replaced,
        dropped or added (code blocks are left as they are)."""
        words = [block.text.split() for block in content.blocks]
        prose = [at for at, block in enumerate(content.blocks) if not block.code]
        edits = max(1, round(self.spec.near_duplicate_edits * sum(len(words[at]) for at in prose)))
        for _ in range(edits):
            block = words[rng.choice(prose)]
            at = rng.randrange(len(block))
            donor = self.pool.prose[rng.randrange(len(self.pool.prose))].text.split()
            action = rng.choice(("replace", "drop", "insert")) if len(block) > 1 else "insert"
            if action == "replace":
                block[at] = rng.choice(donor)
            elif action == "drop":
                del block[at]
            else:
                block.insert(at, rng.choice(donor))
        blocks = tuple(
            block if block.code else Passage(block.source, " ".join(edited))
            for block, edited in zip(content.blocks, words)
        )
        return Content(content.title, blocks), edits

    def _low_quality(self, detail: str, rng: random.Random) -> Content:
        prose = self.pool.prose
        if detail == "link_list":
            links = [Passage("links", f"Read more: {prose[rng.randrange(len(prose))].source}") for _ in range(30)]
            return Content("Useful links", tuple(links))
        if detail == "repeated_lines":
            line = " ".join(prose[rng.randrange(len(prose))].text.split()[:12])
            return Content("Notes", tuple(Passage("repeat", line) for _ in range(25)))
        if detail == "too_short":
            return Content("Untitled", (Passage("short", "Coming soon."),))
        return Content("Sample page", tuple(Passage("lorem", _LOREM) for _ in range(4)))

    def _non_english(self, rng: random.Random) -> Content:
        locale, phrases = self.pool.translations[rng.randrange(len(self.pool.translations))]
        filled = [re.sub(r"%(?:\(\w+\))?[ds]", lambda _: str(rng.randint(2, 59)), phrase) for phrase in phrases]
        lines = tuple(Passage(locale, ", ".join(filled[at : at + 6]) + ".") for at in range(0, len(filled), 6))
        return Content(filled[0], lines, lang=locale.split("_")[0])

    def page(self, index: int) -> Page:
        """Page `index` of the corpus (the same bytes for the same spec, on any machine)."""
        kind = self.kind(index)
        rng = self._rng("page", index)
        site = self._site_of(index)
        record_id = f"<urn:uuid:{uuid.UUID(int=rng.getrandbits(128), version=4)}>"
        date = f"{EPOCH + timedelta(seconds=7 * index):%Y-%m-%dT%H:%M:%SZ}"
        detail, copy_of, edits, content_type = "", None, 0, "text/html; charset=utf-8"
        if kind in ("exact_duplicate", "near_duplicate"):
            copy_of = self._source_of(index)
            original = self.page(copy_of)
            if kind == "exact_duplicate":
                url = f"https://mirror.{original.url.removeprefix('https://')}"
                return replace(
                    original, index=index, kind=kind, url=url, record_id=record_id, date=date, copy_of=copy_of
                )
            content, edits = self._edited(self._original(copy_of), rng)
            site = SITES[(SITES.index(self._site_of(copy_of)) + 1 + rng.randrange(len(SITES) - 1)) % len(SITES)]
        elif kind == "boilerplate":
            content = Content("", ())
        elif kind == "low_quality":
            detail = rng.choice(LOW_QUALITY)
            content = self._low_quality(detail, rng)
        elif kind == "non_english":
            content = self._non_english(rng)
            detail = content.lang
        else:
            content = self._original(index)
        if kind == "malformed":
            detail = rng.choice(MALFORMED)
        url = f"https://{site.host}/{slug(content.title or kind)}-{index}.html"
        rendered, boilerplate, byline = render(site, content, self._related(rng), rng)
        payload = rendered.encode("utf-8")
        main_text = content.text()
        if kind == "malformed":
            payload, content_type = _malformed_payload(detail, payload, rng)
            main_text, boilerplate, byline = "", (), ""
        return Page(
            index=index, kind=kind, detail=detail, url=url, record_id=record_id, date=date,
            content_type=content_type, payload=payload, main_text=main_text, boilerplate=boilerplate,
            byline=byline, copy_of=copy_of, edits=edits,
        )  # fmt: skip

    def _site_of(self, index: int) -> Site:
        return SITES[self._rng("site", index).randrange(len(SITES))]

    def pages(self) -> Iterator[Page]:
        for index in range(self.spec.pages):
            yield self.page(index)


def _malformed_payload(detail: str, payload: bytes, rng: random.Random) -> tuple[bytes, str]:
    """The HTTP payload (and content type) of a malformed record of kind `detail`."""
    if detail == "invalid_utf8":
        at = rng.randrange(len(payload) // 2, len(payload))
        return payload[:at] + b"\xff\xfe\xc3(" + payload[at:], "text/html; charset=utf-8"
    if detail == "empty_payload":
        return b"", "text/html; charset=utf-8"
    if detail == "binary_payload":
        return b"\x89PNG\r\n\x1a\n" + rng.randbytes(2048), "image/png"
    return payload, "not_http"  # the record's block will be the page with no HTTP head
