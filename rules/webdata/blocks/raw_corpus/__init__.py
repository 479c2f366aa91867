"""A raw web corpus made offline and deterministically, with its ground truth.

Web-data steps need raw pages to run on, and tests and benchmarks need to know what is in
them: which page is a copy of which, which is boilerplate, which is not English. This
package makes WARC files (written with `warcio`, gzip per record, as Common Crawl ships
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

`pool` reads the text pages draw from, `sites` renders a page in a made-up site, `pages`
makes each page of a spec, and `warc` writes them as WARC files with the ground truth.
"""
