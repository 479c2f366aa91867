"""A raw web corpus made offline and deterministically, with its ground truth.

Web-data steps need raw pages to run on, and tests and benchmarks need to know what is in
them: which page is a copy of which, which is boilerplate, which is not English. This
module makes WARC files (written with `warcio`, gzip per record, as Common Crawl ships
them) of HTML pages rendered from what every machine with Python has: the reference
documentation shipped in the standard library (`pydoc_data.topics`), and the docstrings
and source of the standard library's modules. Each page wraps its main text in the
boilerplate of one of a few made-up sites (head scripts and styles, header, navigation,
sidebar, byline, comments, newsletter and cookie notices, footer).

Pages are drawn by kind at the rates of a `RawCorpusSpec`:

- `original`: a title and paragraphs (now and then a code block) drawn from the pool;
- `exact_duplicate`: an earlier original's HTML at another URL (a mirror);
- `near_duplicate`: an earlier original's text with a share of its words edited,
  on another site (syndication);
- `boilerplate`: a site's chrome around no main text (a tag or login page);
- `low_quality`: a list of links, one line repeated, a single short line, or lorem ipsum;
- `non_english`: translated text. Neither Python nor the project's packages ship
  non-English prose; the real translations on every machine with the project installed
  are `humanize`'s message catalogs (36 languages, a dependency of Levanter's
  checkpointing, orbax): short phrases ("vor 3 Tagen"), joined into a page;
- `malformed`: a record a reader must skip: invalid UTF-8 under a UTF-8 charset, an empty
  payload, a block that is no HTTP response, a binary payload (an image). With
  `truncate_last_record`, the corpus also ends in a record cut in half (a crawl killed
  while writing).

Every choice is a function of (seed, page index) alone (`random.Random` seeded with a
string is the same on every platform and process), so the same spec gives the same bytes,
any page can be made again on its own (`page()`: the benchmark scores extraction
against `Page.main_text` without storing it), and writing 500 MB takes memory for one
page (46 MB of resident memory for 2,000 pages and for 20,000, 50 MB of WARC; 500 MB is
about 200,000 pages). `ground_truth.jsonl` records each page's kind and, for copies, the
URL and record id of the original, from which dedup precision and recall are computed.

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

import ast
import html
import io
import json
import random
import re
import sysconfig
import textwrap
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import BinaryIO, TextIO

from warcio.recordloader import ArcWarcRecord
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from rules.data import RUNNING_PYTHON, stdlib_files

GROUND_TRUTH = "ground_truth.jsonl"
WARC_DIRECTORY = "warc"
KINDS = ("original", "exact_duplicate", "near_duplicate", "boilerplate", "low_quality", "non_english", "malformed")
LOW_QUALITY = ("link_list", "repeated_lines", "too_short", "lorem_ipsum")
MALFORMED = ("invalid_utf8", "empty_payload", "not_http", "binary_payload")
TRUNCATED = "truncated"
MIN_PARAGRAPH_WORDS = 15  # shorter docstring paragraphs are signatures and one-liners, not prose
POOL_PER_PAGE = 64  # paragraphs an original draws from, a page of the corpus
VARIANT_EDITS = 0.25  # share of a pool paragraph's words its variants replace
_EPOCH = datetime(2024, 1, 1, tzinfo=UTC)
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


# -- the pool of text -----------------------------------------------------------------------


@dataclass(frozen=True)
class Passage:
    """A paragraph of prose, or a block of code, and the module or topic it came from."""

    source: str
    text: str
    code: bool = False


def _paragraphs(text: str) -> Iterator[str]:
    """Prose paragraphs of a docstring or doc topic, each unwrapped to one line.

    Indented blocks (grammar, examples), doctests and underlines of headings are left out.
    """
    for block in re.split(r"\n\s*\n", text):
        lines = block.splitlines()
        if not lines or any(line.startswith((" ", "\t", ">>>")) for line in lines):
            continue
        if re.fullmatch(r"[*=\-~^]+", lines[-1].strip()):
            continue
        paragraph = " ".join(line.strip() for line in lines)
        if len(paragraph.split()) >= MIN_PARAGRAPH_WORDS:
            yield paragraph


def _stdlib_passages(path: Path, name: str) -> Iterator[Passage]:
    """The docstring paragraphs of a module, and the source of its documented functions."""
    try:
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source)
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return
    lines = source.splitlines(keepends=True)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        docstring = ast.get_docstring(node)
        for paragraph in _paragraphs(docstring or ""):
            yield Passage(name, paragraph)
        if isinstance(node, ast.FunctionDef) and docstring and 5 <= node.end_lineno - node.lineno <= 40:
            yield Passage(name, textwrap.dedent("".join(lines[node.lineno - 1 : node.end_lineno])), code=True)


@dataclass(frozen=True)
class Pool:
    """The distinct passages pages are drawn from, in a fixed order."""

    prose: tuple[Passage, ...]
    code: tuple[Passage, ...]
    translations: tuple[tuple[str, tuple[str, ...]], ...]  # (locale, phrases), sorted by locale

    @classmethod
    def load(cls, stdlib_modules: int | None) -> Pool:
        """The docs topics, then the first `stdlib_modules` stdlib modules (sorted paths).

        Passages met twice (docstrings copied between modules) are kept once, so no two
        originals share text by accident and the ground truth's copies are the only ones.
        """
        from pydoc_data.topics import topics

        passages = [
            Passage(f"reference: {name}", text) for name in sorted(topics) for text in _paragraphs(topics[name])
        ]
        root = Path(sysconfig.get_paths()["stdlib"])
        for path in stdlib_files(root)[:stdlib_modules]:
            module = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
            passages.extend(_stdlib_passages(path, module))
        seen: set[str] = set()
        distinct = [p for p in passages if not (p.text in seen or seen.add(p.text))]
        return cls(
            prose=tuple(p for p in distinct if not p.code),
            code=tuple(p for p in distinct if p.code),
            translations=translations(),
        )


def pool_sources(stdlib_modules: int | None) -> dict[str, Path]:
    """Every file `Pool.load(stdlib_modules)` reads, by a name that does not depend on where
    Python is installed: a step's external inputs, so its key follows their content."""
    from pydoc_data import topics

    root = Path(sysconfig.get_paths()["stdlib"])
    found = {path.relative_to(root).as_posix(): path for path in stdlib_files(root)[:stdlib_modules]}
    found["pydoc_data/topics.py"] = Path(topics.__file__)
    return {**found, **humanize_catalogs()}


def humanize_catalogs() -> dict[str, Path]:
    """humanize's message catalogs, by locale order: `humanize/<locale>/humanize.po`."""
    catalogs = sorted(Path(str(resources.files("humanize") / "locale")).glob("*/LC_MESSAGES/humanize.po"))
    return {f"humanize/{catalog.parent.parent.name}/{catalog.name}": catalog for catalog in catalogs}


def translations() -> tuple[tuple[str, tuple[str, ...]], ...]:
    """humanize's translated phrases by locale (the msgstr lines of its .po catalogs)."""
    found = []
    for catalog in humanize_catalogs().values():
        phrases = []
        for line in catalog.read_text(encoding="utf-8").splitlines():
            quoted = re.fullmatch(r'msgstr(?:\[\d+\])? (".*")', line)
            if quoted and (phrase := ast.literal_eval(quoted.group(1)).strip()):
                phrases.append(phrase)
        if phrases:
            found.append((catalog.parent.parent.name, tuple(dict.fromkeys(phrases))))
    return tuple(found)


# -- sites ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """The markup a kind of site software wraps around each part of a page.

    Class names and ids are those of the software each layout imitates (Sphinx, WordPress,
    MediaWiki, a Q&A forum), since extractors find the main text by exactly such names.
    Each field is an (opening, closing) pair of tags, but `meta`, a format string of the
    byline.
    """

    header: tuple[str, str]
    sidebar: tuple[str, str]
    article: tuple[str, str]
    title: tuple[str, str]
    body: tuple[str, str]
    meta: str
    comments: tuple[str, str]
    comment: tuple[str, str]
    footer: tuple[str, str]


LAYOUTS = {
    "sphinx": Layout(
        header=('<div class="related" role="navigation" aria-label="related navigation"><ul>', "</ul></div>"),
        sidebar=('<div class="sphinxsidebar" role="navigation"><div class="sphinxsidebarwrapper">', "</div></div>"),
        article=('<div class="document"><div class="documentwrapper"><div class="body" role="main"><section>',
                 "</section></div></div></div>"),
        title=("<h1>", "</h1>"),
        body=("", ""),
        meta='<p class="last-updated">Last updated on {date}.</p>',
        comments=("", ""),
        comment=("", ""),
        footer=('<div class="footer" role="contentinfo"><ul>', "</ul></div>"),
    ),
    "wordpress": Layout(
        header=('<header id="masthead" class="site-header"><nav id="site-navigation" class="main-navigation"><ul>',
                "</ul></nav></header>"),
        sidebar=('<aside id="secondary" class="widget-area"><section class="widget widget_recent_entries"><ul>',
                 "</ul></section></aside>"),
        article=('<main id="main" class="site-main"><article class="post type-post status-publish">', "</article>"),
        title=('<header class="entry-header"><h1 class="entry-title">', "</h1>"),
        body=('<div class="entry-content">', "</div>"),
        meta='<div class="entry-meta"><span class="posted-on">Posted on {date}</span>'
        '<span class="byline"> by <span class="author vcard">{author}</span></span></div></header>',
        comments=('<div id="comments" class="comments-area"><h2 class="comments-title">Comments</h2>'
                  '<ol class="comment-list">', "</ol></div></main>"),
        comment=('<li class="comment"><article class="comment-body"><div class="comment-content"><p>',
                 "</p></div></article></li>"),
        footer=('<footer id="colophon" class="site-footer"><div class="site-info"><ul>', "</ul></div></footer>"),
    ),
    "mediawiki": Layout(
        header=('<div id="mw-head"><div id="p-navigation" class="vector-menu" role="navigation"><ul>',
                "</ul></div></div>"),
        sidebar=('<div id="mw-panel" class="vector-legacy-sidebar"><div class="portal" role="navigation"><ul>',
                 "</ul></div></div>"),
        article=('<div id="content" class="mw-body" role="main">', "</div>"),
        title=('<h1 id="firstHeading" class="firstHeading">', "</h1>"),
        body=('<div id="bodyContent"><div id="mw-content-text" class="mw-body-content">', "</div></div>"),
        meta='<div id="siteSub">From {site}, edited {date} by {author}</div>',
        comments=("", ""),
        comment=("", ""),
        footer=('<div id="footer" role="contentinfo"><ul id="footer-places">', "</ul></div>"),
    ),
    "forum": Layout(
        header=('<header class="top-bar"><nav class="navigation" role="navigation"><ul>', "</ul></nav></header>"),
        sidebar=('<div id="sidebar" class="sidebar"><div class="module sidebar-linked"><ul>', "</ul></div></div>"),
        article=('<div id="mainbar" role="main"><div class="question" id="question">', "</div></div>"),
        title=('<h1 itemprop="name" class="question-hyperlink">', "</h1>"),
        body=('<div class="post-text" itemprop="text">', "</div>"),
        meta='<div class="user-info"><div class="user-action-time">asked {date}</div>'
        '<div class="user-details">{author}</div></div>',
        comments=('<div class="comments"><ul class="comments-list">', "</ul></div>"),
        comment=('<li class="comment"><div class="comment-text"><span class="comment-copy">', "</span></div></li>"),
        footer=('<footer id="footer" class="site-footer"><ul>', "</ul></footer>"),
    ),
}  # fmt: skip


@dataclass(frozen=True)
class Site:
    """A made-up site: its host, name, layout and the chrome every page of it carries."""

    host: str
    name: str
    layout: str
    nav: tuple[str, ...]
    sidebar_title: str
    footer: tuple[str, ...]
    notice: str

    def phrases(self) -> tuple[str, ...]:
        """The visible boilerplate shared by every page of the site."""
        return (self.name, *self.nav, self.sidebar_title, *self.footer, self.notice)


SITES = (
    Site(
        host="pydocs.example.org",
        name="PyDocs Mirror",
        layout="sphinx",
        nav=("Home", "Library Reference", "Language Reference", "Tutorials", "Downloads", "Community", "About"),
        sidebar_title="Related modules",
        footer=("Copyright 2024 PyDocs Mirror. All rights reserved.", "Terms of Use", "Privacy Policy", "Contact us"),
        notice="This website uses cookies to ensure you get the best experience on our website.",
    ),
    Site(
        host="stdlib-notes.example.net",
        name="Stdlib Notes",
        layout="wordpress",
        nav=("Blog", "Archive", "Categories", "Newsletter", "Sponsors", "Write for us"),
        sidebar_title="Popular posts",
        footer=("Stdlib Notes is written by volunteers.", "Cookie Policy", "Imprint", "RSS feed"),
        notice="Subscribe to our newsletter and never miss a post about the Python standard library!",
    ),
    Site(
        host="codewiki.example.com",
        name="CodeWiki",
        layout="mediawiki",
        nav=("Main page", "Recent changes", "Random article", "Help", "Log in", "Create account"),
        sidebar_title="In other articles",
        footer=("Text is available under a Creative Commons license.", "Disclaimers", "Privacy Policy", "Mobile view"),
        notice="Please enable JavaScript in your browser to use all features of this site.",
    ),
    Site(
        host="devforum.example.io",
        name="DevForum",
        layout="forum",
        nav=("Questions", "Tags", "Users", "Unanswered", "Jobs", "Ask a question"),
        sidebar_title="Linked questions",
        footer=("DevForum, a community of developers.", "Terms of Use", "Cookie settings", "Advertise with us"),
        notice="By continuing to browse you agree to our use of cookies.",
    ),
)

_HEAD_SCRIPT = (
    "window.dataLayer = window.dataLayer || [];\n"
    "function gtag(){dataLayer.push(arguments);}\n"
    "gtag('js', new Date()); gtag('config', 'UA-000000-1');\n"
)
_STYLE = "body { font-family: sans-serif; margin: 0 } .nav li { display: inline } .sidebar { float: right }"
_COMMENTS = (
    "Great write-up, thanks!",
    "This helped me fix a bug at work today.",
    "Does this also work on Windows?",
    "I always forget how this works, bookmarked.",
)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60] or "page"


@dataclass(frozen=True)
class _Content:
    """The main content of a page: a title and blocks (prose paragraphs or code)."""

    title: str
    blocks: tuple[Passage, ...]
    lang: str = "en"

    def text(self) -> str:
        return "\n\n".join([self.title, *(block.text for block in self.blocks)]) if self.title else ""


def _render(
    site: Site, content: _Content, related: Sequence[str], rng: random.Random
) -> tuple[str, tuple[str, ...], str]:
    """A whole HTML page of `site` around `content`, its visible boilerplate and its byline."""
    e = html.escape
    layout = LAYOUTS[site.layout]
    author = rng.choice(("admin", "editor", "guest author", "the team"))
    date = f"{(_EPOCH - timedelta(days=rng.randrange(2000))):%B %d, %Y}"
    meta = layout.meta.format(date=e(date), author=e(author), site=e(site.name))
    comments = rng.sample(_COMMENTS, 2) if layout.comments[0] else []
    boilerplate = (*site.phrases(), "Skip to content", *related, *comments)
    byline = re.sub("<[^>]+>", "", html.unescape(meta)) if content.title else ""
    nav = "".join(f'<li><a href="/{_slug(item)}/">{e(item)}</a></li>' for item in site.nav)
    side = "".join(f'<li><a href="/{_slug(item)}.html">{e(item)}</a></li>' for item in related)
    blocks = "".join(
        f'<div class="highlight"><pre>{e(block.text)}</pre></div>\n' if block.code else f"<p>{e(block.text)}</p>\n"
        for block in content.blocks
    )
    if content.title:
        article = (
            f"{layout.title[0]}{e(content.title)}{layout.title[1]}\n{meta}\n{layout.body[0]}{blocks}{layout.body[1]}"
        )
    else:
        article = ""
    comment_html = "".join(f"{layout.comment[0]}{e(text)}{layout.comment[1]}" for text in comments)
    footer = "".join(f"<li>{e(item)}</li>" for item in site.footer)
    page = (
        f'<!DOCTYPE html>\n<html lang="{content.lang}">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{e(content.title or site.name)} | {e(site.name)}</title>\n"
        f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f'<link rel="stylesheet" href="/static/site.css">\n<style>{_STYLE}</style>\n'
        f"<script>{_HEAD_SCRIPT}</script>\n</head>\n<body>\n"
        f'<a class="skip-link" href="#content">Skip to content</a>\n'
        f'<div class="site-branding"><a class="logo" href="/">{e(site.name)}</a></div>\n'
        f"{layout.header[0]}{nav}{layout.header[1]}\n"
        f'<form class="search-form" role="search" action="/search"><input name="q" placeholder="Search">'
        f"<button>Go</button></form>\n"
        f"{layout.article[0]}\n{article}{layout.article[1]}\n"
        f"{layout.comments[0]}{comment_html}{layout.comments[1]}\n"
        f"{layout.sidebar[0]}<h3>{e(site.sidebar_title)}</h3>{side}{layout.sidebar[1]}\n"
        f'<div id="cookie-notice" class="cookie-banner" role="dialog">{e(site.notice)}</div>\n'
        f"{layout.footer[0]}{footer}{layout.footer[1]}\n"
        f'<script src="/static/analytics.js" async></script>\n</body>\n</html>\n'
    )
    return page, boilerplate, byline


# -- pages ----------------------------------------------------------------------------------


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

    def _original(self, index: int) -> _Content:
        rng = self._rng("content", index)
        paragraphs = max(len(self.pool.prose), POOL_PER_PAGE * (index + 1))
        blocks = [self._paragraph(rng.randrange(paragraphs)) for _ in range(rng.randint(3, 8))]
        if self.pool.code and rng.random() < 0.25:
            blocks.insert(rng.randint(1, len(blocks)), self.pool.code[rng.randrange(len(self.pool.code))])
        title = f"{blocks[0].source}: {' '.join(blocks[0].text.split()[:6])}"
        return _Content(title, tuple(blocks))

    def _related(self, rng: random.Random, count: int = 6) -> list[str]:
        prose = self.pool.prose
        return [f"More on {prose[rng.randrange(len(prose))].source}" for _ in range(count)]

    def _edited(self, content: _Content, rng: random.Random) -> tuple[_Content, int]:
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
        return _Content(content.title, blocks), edits

    def _low_quality(self, detail: str, rng: random.Random) -> _Content:
        prose = self.pool.prose
        if detail == "link_list":
            links = [Passage("links", f"Read more: {prose[rng.randrange(len(prose))].source}") for _ in range(30)]
            return _Content("Useful links", tuple(links))
        if detail == "repeated_lines":
            line = " ".join(prose[rng.randrange(len(prose))].text.split()[:12])
            return _Content("Notes", tuple(Passage("repeat", line) for _ in range(25)))
        if detail == "too_short":
            return _Content("Untitled", (Passage("short", "Coming soon."),))
        return _Content("Sample page", tuple(Passage("lorem", _LOREM) for _ in range(4)))

    def _non_english(self, rng: random.Random) -> _Content:
        locale, phrases = self.pool.translations[rng.randrange(len(self.pool.translations))]
        filled = [re.sub(r"%(?:\(\w+\))?[ds]", lambda _: str(rng.randint(2, 59)), phrase) for phrase in phrases]
        lines = tuple(Passage(locale, ", ".join(filled[at : at + 6]) + ".") for at in range(0, len(filled), 6))
        return _Content(filled[0], lines, lang=locale.split("_")[0])

    def page(self, index: int) -> Page:
        """Page `index` of the corpus (the same bytes for the same spec, on any machine)."""
        kind = self.kind(index)
        rng = self._rng("page", index)
        site = self._site_of(index)
        record_id = f"<urn:uuid:{uuid.UUID(int=rng.getrandbits(128), version=4)}>"
        date = f"{_EPOCH + timedelta(seconds=7 * index):%Y-%m-%dT%H:%M:%SZ}"
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
            content = _Content("", ())
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
        url = f"https://{site.host}/{_slug(content.title or kind)}-{index}.html"
        rendered, boilerplate, byline = _render(site, content, self._related(rng), rng)
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


# -- WARC files -----------------------------------------------------------------------------


@dataclass(frozen=True)
class WrittenCorpus:
    """What `write_raw_corpus` wrote: the WARC files and the count of pages by kind."""

    files: tuple[str, ...]
    kinds: dict[str, int]
    bytes: int

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def _warc_headers(record_type: str, page: Page, record_id: str, **extra: str) -> StatusAndHeaders:
    fields = {
        "WARC-Type": record_type,
        "WARC-Target-URI": page.url,
        "WARC-Date": page.date,
        "WARC-Record-ID": record_id,
    }
    return StatusAndHeaders("", list({**fields, **extra}.items()), protocol="WARC/1.0")


def response_record(writer: WARCWriter, page: Page) -> ArcWarcRecord:
    """The WARC response record of `page`: an HTTP response around its payload.

    A `not_http` page's block is its payload alone, with no HTTP status line and headers.
    """
    headers = _warc_headers("response", page, page.record_id, **{"Content-Type": "application/http; msgtype=response"})
    if page.content_type == "not_http":
        return ArcWarcRecord("warc", "response", headers, io.BytesIO(page.payload), None, "", len(page.payload))
    http = StatusAndHeaders(
        "200 OK",
        [("Content-Type", page.content_type), ("Content-Length", str(len(page.payload))), ("Server", "nginx")],
        protocol="HTTP/1.1",
    )
    return writer.create_warc_record(
        page.url, "response", payload=io.BytesIO(page.payload), http_headers=http, warc_headers=headers
    )


def _request(writer: WARCWriter, page: Page) -> ArcWarcRecord:
    """The WARC request record before `page`'s response, as a crawler writes it."""
    _, _, host, path = page.url.split("/", 3)
    http = StatusAndHeaders(f"GET /{path} HTTP/1.1", [("Host", host), ("User-Agent", "marinbuild-testcrawler/1.0")])
    record_id = f"<urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, page.record_id)}>"
    headers = _warc_headers("request", page, record_id, **{"WARC-Concurrent-To": page.record_id})
    return writer.create_warc_record(page.url, "request", http_headers=http, warc_headers=headers)


def _warcinfo(writer: WARCWriter, name: str, spec: RawCorpusSpec) -> ArcWarcRecord:
    fields = {"software": "marinbuild rules.webdata.raw_corpus", "python": RUNNING_PYTHON, "seed": spec.seed}
    info = "".join(f"{key}: {value}\r\n" for key, value in fields.items()).encode()
    headers = StatusAndHeaders(
        "",
        [
            ("WARC-Type", "warcinfo"),
            ("WARC-Record-ID", f"<urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, f'{spec.seed}/{name}')}>"),
            ("WARC-Filename", name),
            ("WARC-Date", f"{_EPOCH:%Y-%m-%dT%H:%M:%SZ}"),
        ],
        protocol="WARC/1.0",
    )
    return writer.create_warc_record("", "warcinfo", payload=io.BytesIO(info), length=len(info), warc_headers=headers)


def write_raw_corpus(
    spec: RawCorpusSpec,
    out: Path,
    corpus: RawCorpus | None = None,
    progress: Callable[[int], None] = lambda pages: None,
) -> WrittenCorpus:
    """Write the WARC files of `spec` under `out/warc/` and `out/ground_truth.jsonl`.

    Files hold `pages_per_file` pages each (`part-00000.warc.gz`, ...), each page a
    request and a response record after the file's warcinfo record. Memory is one page.
    `progress` is told the pages written, after each file.
    """
    corpus = corpus or RawCorpus(spec)
    directory = out / WARC_DIRECTORY
    directory.mkdir(parents=True)
    kinds = dict.fromkeys(KINDS, 0)
    files: list[str] = []
    with open(out / GROUND_TRUTH, "w", encoding="utf-8") as truth:
        for first in range(0, spec.pages, spec.pages_per_file):
            name = f"part-{len(files):05d}.warc.gz"
            files.append(name)
            last = min(first + spec.pages_per_file, spec.pages)
            with open(directory / name, "wb") as warc:
                writer = WARCWriter(warc, gzip=True)
                writer.write_record(_warcinfo(writer, name, spec))
                for index in range(first, last):
                    page = corpus.page(index)
                    writer.write_record(_request(writer, page))
                    writer.write_record(response_record(writer, page))
                    kinds[page.kind] += 1
                    truth.write(json.dumps(_truth(page, name, corpus)) + "\n")
                if spec.truncate_last_record and last == spec.pages:
                    _write_truncated(writer, warc, corpus, name, truth)
                    kinds["malformed"] += 1
            progress(last)
    size = sum((directory / name).stat().st_size for name in files)
    return WrittenCorpus(files=tuple(files), kinds=kinds, bytes=size)


def _truth(page: Page, file: str, corpus: RawCorpus) -> dict[str, object]:
    original = corpus.page(page.copy_of) if page.copy_of is not None else None
    return {
        "page": page.index,
        "file": file,
        "url": page.url,
        "record_id": page.record_id,
        "kind": page.kind,
        "detail": page.detail,
        "copy_of": original.url if original else None,
        "copy_of_record": original.record_id if original else None,
        "edits": page.edits,
    }


def _write_truncated(writer: WARCWriter, warc: BinaryIO, corpus: RawCorpus, name: str, truth: TextIO) -> None:
    """A last record cut in half, as a crawler killed mid-write leaves it."""
    index = corpus.spec.pages
    page = corpus.page(index)
    page = Page(
        index, "malformed", TRUNCATED, page.url, page.record_id, page.date, "text/html; charset=utf-8",
        page.payload, "", (),
    )  # fmt: skip
    whole = io.BytesIO()
    WARCWriter(whole, gzip=True).write_record(response_record(writer, page))
    warc.write(whole.getvalue()[: len(whole.getvalue()) // 2])
    truth.write(json.dumps(_truth(page, name, corpus)) + "\n")
