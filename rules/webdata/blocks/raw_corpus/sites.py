"""The made-up sites a page is rendered in: each with the layout of the software it
imitates (Sphinx, WordPress, MediaWiki, a Q&A forum) and the chrome every page of it
carries, the boilerplate extractors must leave out."""

from __future__ import annotations

import html
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from rules.webdata.blocks.raw_corpus.pool import Passage

EPOCH = datetime(2024, 1, 1, tzinfo=UTC)


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


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60] or "page"


@dataclass(frozen=True)
class Content:
    """The main content of a page: a title and blocks (prose paragraphs or code)."""

    title: str
    blocks: tuple[Passage, ...]
    lang: str = "en"

    def text(self) -> str:
        return "\n\n".join([self.title, *(block.text for block in self.blocks)]) if self.title else ""


def render(
    site: Site, content: Content, related: Sequence[str], rng: random.Random
) -> tuple[str, tuple[str, ...], str]:
    """A whole HTML page of `site` around `content`, its visible boilerplate and its byline."""
    e = html.escape
    layout = LAYOUTS[site.layout]
    author = rng.choice(("admin", "editor", "guest author", "the team"))
    date = f"{(EPOCH - timedelta(days=rng.randrange(2000))):%B %d, %Y}"
    meta = layout.meta.format(date=e(date), author=e(author), site=e(site.name))
    comments = rng.sample(_COMMENTS, 2) if layout.comments[0] else []
    boilerplate = (*site.phrases(), "Skip to content", *related, *comments)
    byline = re.sub("<[^>]+>", "", html.unescape(meta)) if content.title else ""
    nav = "".join(f'<li><a href="/{slug(item)}/">{e(item)}</a></li>' for item in site.nav)
    side = "".join(f'<li><a href="/{slug(item)}.html">{e(item)}</a></li>' for item in related)
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
