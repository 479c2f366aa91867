"""The body of an HTTP response as a browser renders it: transfer and content codings undone.

Many crawlers (warcio and the recorders built on it, wget, Heritrix, proxies such as
warcprox) store the body as it came off the wire: chunked, gzipped, Brotli'd. Others store
it decoded and rename the headers that said otherwise (Common Crawl's `X-Crawler-Content-
Encoding`, Browsertrix's `x-orig-content-encoding`): those are never undone again, since
only `Transfer-Encoding` and `Content-Encoding` are read.

Headers lie, and a lie never puts garbage into the text:

- `Transfer-Encoding: chunked` over a body that does not begin with a chunk-size line (it
  begins with markup, as the body a tool de-chunked but kept the header of): the body as it
  is. Framing that breaks after a valid start is a skip; one that ends early (a crawl cut
  short) keeps the chunks read, as a browser shows the page it received so far.
- A content coding that fails on a body that begins with markup (a decoded body under its
  old header): the body as it is; on anything else, a skip. A stream that ends early keeps
  what it decoded; one that is corrupt is a skip, whatever it decoded before.

A decoded body over the limit (`max_payload_bytes`) is "too large" as soon as it passes it,
never decoded further: a gzip bomb of 1 GB of zeros costs the limit, not 1 GB.
"""

from __future__ import annotations

import io
import re
import zlib
from collections.abc import Callable

import brotli
import zstandard

from rules.webdata.blocks.documents import Skipped

_CHUNK_SIZE = re.compile(rb"[0-9a-fA-F]+")  # a size past the body's end is a body cut short, whatever its size
_CHUNK_LINE_BYTES = 4096  # a chunk-size line with its extensions; a longer one is no framing
_MARKUP = re.compile(rb"(?:\xef\xbb\xbf|\xff\xfe|\xfe\xff)?[\t\n\x0c\r \x00]*<")  # optional BOM, spaces, '<'
_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_WINDOW_BYTES = 8 * 2**20  # the most a browser must accept (RFC 9659); a frame asking more is refused


def codings(header: str | None) -> list[str]:
    """The codings a `Content-Encoding` or `Transfer-Encoding` header lists, in the order
    they were applied (`gzip, chunked`), lowercase, `identity` left out."""
    if not header:
        return []
    return [coding for part in header.split(",") if (coding := part.strip().lower()) and coding != "identity"]


def reads_as_markup(body: bytes) -> bool:
    """Whether the body begins as an HTML page does (after a byte-order mark and spaces):
    what no chunk-size line, gzip, zlib or zstd stream begins with."""
    return _MARKUP.match(body) is not None


def http_body(payload: bytes, transfer_encoding: str | None, content_encoding: str | None, limit: int) -> bytes:
    """The body with its transfer codings, then its content codings undone, last applied
    first. Skipped ("too large", "bad chunked encoding", "bad content encoding",
    "unsupported content encoding") when it cannot be."""
    body = payload
    transfer = codings(transfer_encoding)
    if transfer and transfer[-1] == "chunked":
        body = dechunked(body, limit)
        transfer = transfer[:-1]
    for coding in reversed(codings(content_encoding) + transfer):  # the transfer codings went on last
        body = _undone(body, coding, limit)
    return body


def dechunked(body: bytes, limit: int) -> bytes:
    """The data of a chunked body: its chunks joined, their size lines and trailers dropped.
    A body that does not begin with a chunk size (but with markup, say) is not chunked."""
    if reads_as_markup(body) or _CHUNK_SIZE.match(body) is None:
        return body
    chunks: list[bytes] = []
    size_total = position = 0
    while position < len(body):
        line_end = body.find(b"\n", position, position + _CHUNK_LINE_BYTES)
        size = _CHUNK_SIZE.fullmatch(body[position:line_end].split(b";", 1)[0].strip()) if line_end >= 0 else None
        if size is None:
            if line_end < 0 and len(body) - position < _CHUNK_LINE_BYTES:
                break  # cut inside a size line: the chunks before it stand
            raise Skipped("bad chunked encoding")
        length = int(size.group(), 16)
        if length == 0:
            break  # the last chunk; trailers follow
        chunk = body[line_end + 1 : line_end + 1 + length]
        size_total += len(chunk)
        if size_total > limit:
            raise Skipped("too large")
        chunks.append(chunk)
        position = _after_line_break(body, line_end + 1 + length)
    return b"".join(chunks)


def _after_line_break(body: bytes, position: int) -> int:
    """Past the CRLF (or a bare LF) that ends a chunk's data, which must come next."""
    for ending in (b"\r\n", b"\n"):
        if body.startswith(ending, position):
            return position + len(ending)
    if position >= len(body):
        return position  # the body ends with the chunk
    raise Skipped("bad chunked encoding")


def _undone(body: bytes, coding: str, limit: int) -> bytes:
    """The body with one content coding undone."""
    decode = _DECODERS.get(coding)
    if decode is None:
        if reads_as_markup(body):
            return body
        raise Skipped("unsupported content encoding")
    try:
        return decode(body, limit)
    except (zlib.error, brotli.error, zstandard.ZstdError):
        if reads_as_markup(body):
            return body
        raise Skipped("bad content encoding") from None


def _inflated(data: bytes, wbits: int, limit: int) -> bytes:
    """`data` inflated (zlib, raw deflate or gzip by `wbits`); gzip members one after the other
    joined, as a browser reads a body of several."""
    out = bytearray()
    while True:
        inflater = zlib.decompressobj(wbits)
        out += inflater.decompress(data, limit + 1 - len(out))
        if len(out) > limit or inflater.unconsumed_tail:
            raise Skipped("too large")
        data = inflater.unused_data
        if not (inflater.eof and data.startswith(_GZIP_MAGIC) and wbits > zlib.MAX_WBITS):
            return bytes(out)  # the end, a stream cut short (what it gave stands), or trailing bytes


def _gunzipped(body: bytes, limit: int) -> bytes:
    if not body.startswith(_GZIP_MAGIC):
        raise zlib.error("no gzip header")
    return _inflated(body, 16 + zlib.MAX_WBITS, limit)


def _deflated(body: bytes, limit: int) -> bytes:
    """HTTP's `deflate` is a zlib stream; many servers send raw deflate, which browsers read too."""
    try:
        return _inflated(body, zlib.MAX_WBITS, limit)
    except zlib.error:
        return _inflated(body, -zlib.MAX_WBITS, limit)


def _unbrotlied(body: bytes, limit: int) -> bytes:
    decompressor = brotli.Decompressor()
    out = decompressor.process(body, output_buffer_limit=limit + 1)
    if len(out) > limit:
        raise Skipped("too large")
    return out


def _unzstded(body: bytes, limit: int) -> bytes:
    reader = zstandard.ZstdDecompressor(max_window_size=_ZSTD_WINDOW_BYTES).stream_reader(
        io.BytesIO(body), read_across_frames=True
    )
    out = reader.read(limit + 1)
    if len(out) > limit:
        raise Skipped("too large")
    return out


_DECODERS: dict[str, Callable[[bytes, int], bytes]] = {
    "gzip": _gunzipped,
    "x-gzip": _gunzipped,
    "deflate": _deflated,
    "br": _unbrotlied,
    "zstd": _unzstded,
}
