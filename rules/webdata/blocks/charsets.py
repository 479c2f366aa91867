"""The text of a web page's bytes, in the charset a browser would decode them in.

The charset comes, in this order, from what the HTML standard's encoding sniffing puts
first: a byte-order mark, the HTTP `Content-Type` header's `charset`, the `<meta>` prescan
of the page's first 1,024 bytes ("prescan a byte stream to determine its encoding": `<meta
charset>` and `<meta http-equiv="Content-Type" content="...; charset=...">`, comments and
other tags' attributes passed over as the standard says), and last a guess: UTF-8 when the
bytes are valid UTF-8, else what Resiliparse's detector (uchardet) says, else windows-1252.

Labels are read as the Encoding Standard maps them, not as Python would: `iso-8859-1`,
`latin1` and `ascii` mean windows-1252, `shift_jis` means Microsoft's superset of it (the
one pages labelled so are written in), a `<meta>` saying UTF-16 means UTF-8. A header
charset the standard does not name (`undefined`, `punycode`, `rot13`, `base64`) is a
counted skip, never a Python codec looked up by that name; so is one the standard decodes
as nothing (`iso-2022-kr`, `hz-gb-2312`: its "replacement" encoding). A page that is not
valid text in the charset it declares (or its byte-order mark does) is a skip too: a few
replacement characters in a browser, but mojibake in a training corpus.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

from resiliparse.parse.encoding import detect_encoding

from rules.webdata.blocks.documents import Skipped

PRESCAN_BYTES = 1024  # what the standard's prescan looks at
_C1_ERRORS = "marinbuild-whatwg-c1"  # the error handler below, by the name codecs knows it by


def _c1_controls(error: UnicodeError) -> tuple[str, int]:
    """Decode a byte 0x80-0x9F that Python's windows-125x table leaves undefined as the C1
    control of the same number, as the Encoding Standard's tables do; any other error stands."""
    if isinstance(error, UnicodeDecodeError) and 0x80 <= error.object[error.start] <= 0x9F:
        return chr(error.object[error.start]), error.start + 1
    raise error


codecs.register_error(_C1_ERRORS, _c1_controls)


@dataclass(frozen=True)
class Encoding:
    """An encoding of the Encoding Standard and the Python codec that decodes it as the
    standard does (None: its "replacement" encoding, which decodes to nothing)."""

    name: str
    codec: str | None
    errors: str = "strict"

    def decode(self, data: bytes) -> str:
        """`data` as text, or Skipped when it is not valid in this encoding. A character cut
        off at the end (a body a crawler truncated at its length limit) is left out."""
        if self.codec is None:
            raise Skipped("unsupported charset")
        if self.name == "x-user-defined":  # ASCII, and the other 128 bytes in a private-use block
            return data.decode("latin-1").translate(_X_USER_DEFINED)
        try:
            return data.decode(self.codec, self.errors)
        except UnicodeDecodeError:
            pass
        try:  # valid but for its end?
            return codecs.getincrementaldecoder(self.codec)(self.errors).decode(data, final=False)
        except UnicodeDecodeError:
            raise Skipped("invalid text encoding") from None


_X_USER_DEFINED = {byte: 0xF780 + byte - 0x80 for byte in range(0x80, 0x100)}

# The Encoding Standard's encodings (https://encoding.spec.whatwg.org/#names-and-labels):
# name -> (the Python codec that decodes it as the standard does, its labels).
_ENCODINGS: dict[str, tuple[str | None, str]] = {
    "utf-8": ("utf-8", "unicode-1-1-utf-8 unicode11utf8 unicode20utf8 utf-8 utf8 x-unicode20utf8"),
    "ibm866": ("cp866", "866 cp866 csibm866 ibm866"),
    "iso-8859-2": (
        "iso8859_2",
        "csisolatin2 iso-8859-2 iso-ir-101 iso8859-2 iso88592 iso_8859-2 iso_8859-2:1987 l2 latin2",
    ),
    "iso-8859-3": (
        "iso8859_3",
        "csisolatin3 iso-8859-3 iso-ir-109 iso8859-3 iso88593 iso_8859-3 iso_8859-3:1988 l3 latin3",
    ),
    "iso-8859-4": (
        "iso8859_4",
        "csisolatin4 iso-8859-4 iso-ir-110 iso8859-4 iso88594 iso_8859-4 iso_8859-4:1988 l4 latin4",
    ),
    "iso-8859-5": (
        "iso8859_5",
        "csisolatincyrillic cyrillic iso-8859-5 iso-ir-144 iso8859-5 iso88595 iso_8859-5 iso_8859-5:1988",
    ),
    "iso-8859-6": (
        "iso8859_6",
        "arabic asmo-708 csiso88596e csiso88596i csisolatinarabic ecma-114 iso-8859-6 iso-8859-6-e iso-8859-6-i "
        "iso-ir-127 iso8859-6 iso88596 iso_8859-6 iso_8859-6:1987",
    ),
    "iso-8859-7": (
        "iso8859_7",
        "csisolatingreek ecma-118 elot_928 greek greek8 iso-8859-7 iso-ir-126 iso8859-7 iso88597 iso_8859-7 "
        "iso_8859-7:1987 sun_eu_greek",
    ),
    "iso-8859-8": (
        "iso8859_8",
        "csiso88598e csisolatinhebrew hebrew iso-8859-8 iso-8859-8-e iso-ir-138 iso8859-8 iso88598 iso_8859-8 "
        "iso_8859-8:1988 visual",
    ),
    "iso-8859-8-i": ("iso8859_8", "csiso88598i iso-8859-8-i logical"),
    "iso-8859-10": ("iso8859_10", "csisolatin6 iso-8859-10 iso-ir-157 iso8859-10 iso885910 l6 latin6"),
    "iso-8859-13": ("iso8859_13", "iso-8859-13 iso8859-13 iso885913"),
    "iso-8859-14": ("iso8859_14", "iso-8859-14 iso8859-14 iso885914"),
    "iso-8859-15": ("iso8859_15", "csisolatin9 iso-8859-15 iso8859-15 iso885915 iso_8859-15 l9"),
    "iso-8859-16": ("iso8859_16", "iso-8859-16"),
    "koi8-r": ("koi8_r", "cskoi8r koi koi8 koi8-r koi8_r"),
    "koi8-u": ("koi8_u", "koi8-ru koi8-u"),
    "macintosh": ("mac_roman", "csmacintosh mac macintosh x-mac-roman"),
    "windows-874": ("cp874", "dos-874 iso-8859-11 iso8859-11 iso885911 tis-620 windows-874"),
    "windows-1250": ("cp1250", "cp1250 windows-1250 x-cp1250"),
    "windows-1251": ("cp1251", "cp1251 windows-1251 x-cp1251"),
    "windows-1252": (
        "cp1252",
        "ansi_x3.4-1968 ascii cp1252 cp819 csisolatin1 ibm819 iso-8859-1 iso-ir-100 iso8859-1 iso88591 iso_8859-1 "
        "iso_8859-1:1987 l1 latin1 us-ascii windows-1252 x-cp1252",
    ),
    "windows-1253": ("cp1253", "cp1253 windows-1253 x-cp1253"),
    "windows-1254": (
        "cp1254",
        "cp1254 csisolatin5 iso-8859-9 iso-ir-148 iso8859-9 iso88599 iso_8859-9 iso_8859-9:1989 l5 latin5 "
        "windows-1254 x-cp1254",
    ),
    "windows-1255": ("cp1255", "cp1255 windows-1255 x-cp1255"),
    "windows-1256": ("cp1256", "cp1256 windows-1256 x-cp1256"),
    "windows-1257": ("cp1257", "cp1257 windows-1257 x-cp1257"),
    "windows-1258": ("cp1258", "cp1258 windows-1258 x-cp1258"),
    "x-mac-cyrillic": ("mac_cyrillic", "x-mac-cyrillic x-mac-ukrainian"),
    "gbk": ("gb18030", "chinese csgb2312 csiso58gb231280 gb2312 gb_2312 gb_2312-80 gbk iso-ir-58 x-gbk"),
    "gb18030": ("gb18030", "gb18030"),
    "big5": ("big5hkscs", "big5 big5-hkscs cn-big5 csbig5 x-x-big5"),
    "euc-jp": ("euc_jp", "cseucpkdfmtjapanese euc-jp x-euc-jp"),
    "iso-2022-jp": ("iso2022_jp", "csiso2022jp iso-2022-jp"),
    "shift_jis": ("cp932", "csshiftjis ms932 ms_kanji shift-jis shift_jis sjis windows-31j x-sjis"),
    "euc-kr": (
        "cp949",
        "cseuckr csksc56011987 euc-kr iso-ir-149 korean ks_c_5601-1987 ks_c_5601-1989 ksc5601 ksc_5601 windows-949",
    ),
    "replacement": (None, "csiso2022kr hz-gb-2312 iso-2022-cn iso-2022-cn-ext iso-2022-kr"),
    "utf-16be": ("utf-16-be", "unicodefffe utf-16be"),
    "utf-16le": ("utf-16-le", "csunicode iso-10646-ucs-2 ucs-2 unicode unicodefeff utf-16 utf-16le"),
    "x-user-defined": ("latin-1", "x-user-defined"),
}
_BY_NAME = {
    name: Encoding(name, codec, _C1_ERRORS if name.startswith("windows-") else "strict")
    for name, (codec, _) in _ENCODINGS.items()
}
_BY_LABEL = {label: _BY_NAME[name] for name, (_, labels) in _ENCODINGS.items() for label in labels.split()}
UTF_8, WINDOWS_1252 = _BY_NAME["utf-8"], _BY_NAME["windows-1252"]


def _by_codec() -> dict[str, Encoding]:
    """Python's name of each codec -> the first encoding of the standard it decodes, for a
    guess the detector names in Python's terms (x-user-defined is no codec of its own)."""
    found: dict[str, Encoding] = {}
    for encoding in _BY_NAME.values():
        if encoding.codec is not None and encoding.name != "x-user-defined":
            found.setdefault(codecs.lookup(encoding.codec).name, encoding)
    return found


_BY_CODEC = _by_codec()
_BOMS = ((b"\xef\xbb\xbf", UTF_8), (b"\xfe\xff", _BY_NAME["utf-16be"]), (b"\xff\xfe", _BY_NAME["utf-16le"]))


def encoding_for(label: str) -> Encoding | None:
    """The Encoding Standard's "get an encoding": the encoding a label names, None for none."""
    return _BY_LABEL.get(label.strip("\t\n\x0c\r ").lower())


def page_text(body: bytes, header_charset: str | None) -> str:
    """The page as text: decoded in the charset of its byte-order mark, else of its HTTP
    header, else of its `<meta>`, else as guessed. Skipped when the header names no charset
    of the standard, or the bytes are not valid in the charset declared."""
    for bom, encoding in _BOMS:
        if body.startswith(bom):
            return encoding.decode(body[len(bom) :])
    if header_charset is not None:
        declared = encoding_for(header_charset)
        if declared is None:
            raise Skipped("unknown charset")
        return declared.decode(body)
    declared = prescan(body)
    return declared.decode(body) if declared is not None else _guessed(body)


def _guessed(body: bytes) -> str:
    """A page that declares no charset: UTF-8 if it is valid UTF-8 (ASCII included), else the
    detector's guess if the bytes are valid in it, else windows-1252, which decodes any bytes."""
    try:
        return UTF_8.decode(body)
    except Skipped:
        pass
    guess = _detected(body)
    if guess is not None and guess.codec is not None:
        try:
            return guess.decode(body)
        except Skipped:
            pass
    return WINDOWS_1252.decode(body)


def _detected(body: bytes) -> Encoding | None:
    """The detector's guess, as an encoding of the standard: its name is a label, or a
    Python name for one of the standard's codecs (`euc_kr`, `iso2022_jp`)."""
    name = detect_encoding(body, html5_compatible=False)
    if not name:
        return None
    try:
        return encoding_for(name) or _BY_CODEC.get(codecs.lookup(name).name)
    except LookupError:
        return None


def content_type(value: str) -> tuple[str, str | None]:
    """The MIME type (lowercase `type/subtype`) and the charset parameter (unquoted) of a
    `Content-Type` header. Of a header sent several times (joined by commas), the last type
    counts, with the last charset given for that type."""
    essence, charset = "", None
    for part in value.split(","):
        mime, *parameters = part.split(";")
        mime = mime.strip().lower()
        if "/" not in mime:
            continue
        if mime != essence:
            essence, charset = mime, None
        for parameter in parameters:
            key, _, given = parameter.partition("=")
            given = given.strip().strip("\"'").strip()
            if key.strip().lower() == "charset" and given:
                charset = given
                break
    return essence, charset


# -- the prescan (HTML standard, "prescan a byte stream to determine its encoding") ----------

_SPACE = b"\t\n\x0c\r "
# "get an attribute": leading spaces and slashes, then '>' (no attribute) or a name and,
# after an '=', a value: quoted, unquoted, or empty when a '>' comes first.
_ATTRIBUTE = re.compile(
    rb"[\t\n\x0c\r /]*(?:(?P<end>>)|(?P<name>[^\t\n\x0c\r />][^\t\n\x0c\r /=>]*)"
    rb"(?:[\t\n\x0c\r ]*=[\t\n\x0c\r ]*"
    rb"(?:\"(?P<dq>[^\"]*)\"|'(?P<sq>[^']*)'|(?=>)|(?P<bare>[^\t\n\x0c\r >\"'][^\t\n\x0c\r >]*)))?)"
)
_AFTER_META = tuple(bytes([byte]) for byte in _SPACE + b"/")  # what "<meta" is followed by in a meta tag
_TAG_NAME_END = re.compile(rb"[\t\n\x0c\r >]")
_CONTENT_CHARSET = re.compile(rb"charset[\t\n\x0c\r ]*=[\t\n\x0c\r ]*")


class _End(Exception):
    """The prescan ran past the bytes it may look at: it finds nothing."""


def prescan(body: bytes) -> Encoding | None:
    """The encoding the `<meta>` of the page's first 1,024 bytes declares, None for none.

    Linear in those bytes: every step moves past what it read. Tag and attribute names are
    compared without case, which lowering the bytes once gives (only A-Z are lowered)."""
    data = body[:PRESCAN_BYTES].lower()
    if data.startswith(b"<\x00?\x00x\x00"):  # an XML declaration in UTF-16: the standard's first check
        return _BY_NAME["utf-16le"]
    if data.startswith(b"\x00<\x00?\x00x"):
        return _BY_NAME["utf-16be"]
    try:
        return _scan(data)
    except _End:
        return None


def _scan(data: bytes) -> Encoding | None:
    position = data.find(b"<")
    while 0 <= position < len(data):
        if data.startswith(b"<!--", position):
            position = _after(data, b"-->", position + 2)
            continue
        if data.startswith(b"<meta", position) and data[position + 5 : position + 6] in _AFTER_META:
            found, position = _meta(data, position + 5)
            if found is not None:
                return found
        elif _starts_tag(data, position):
            match = _TAG_NAME_END.search(data, position)
            if match is None:
                raise _End
            position = _skip_attributes(data, match.start())
        elif data[position + 1 : position + 2] in (b"!", b"/", b"?"):
            position = _after(data, b">", position + 1) - 1
        position = data.find(b"<", position + 1)
    return None


def _starts_tag(data: bytes, position: int) -> bool:
    """`<` or `</` followed by an ASCII letter (lowered already)."""
    after = position + 2 if data.startswith(b"</", position) else position + 1
    return after < len(data) and 0x61 <= data[after] <= 0x7A


def _after(data: bytes, marker: bytes, start: int) -> int:
    """The position just past the first `marker` from `start`."""
    found = data.find(marker, start)
    if found < 0:
        raise _End
    return found + len(marker)


def _attribute(data: bytes, position: int) -> tuple[bytes, bytes, int] | None:
    """(name, value, position after it), or None at the tag's '>'."""
    match = _ATTRIBUTE.match(data, position)
    if match is None:  # nothing but spaces and slashes to the end
        raise _End
    if match.group("end") is not None:
        return None
    name = match.group("name")
    if name is None or match.end() >= len(data):  # the bytes end inside the attribute
        raise _End
    value = next((match.group(g) for g in ("dq", "sq", "bare") if match.group(g) is not None), b"")
    if match.group("dq") is None and match.group("sq") is None and match.group("bare") is None:
        rest = data[match.end() :].lstrip(_SPACE)
        if rest.startswith(b"=") and rest[1:].lstrip(_SPACE)[:1] in (b'"', b"'"):
            raise _End  # a quoted value never closed: it runs past the bytes looked at
    return name, value, match.end()


def _skip_attributes(data: bytes, position: int) -> int:
    """Past every attribute of a tag; returns the position of its '>'."""
    while (attribute := _attribute(data, position)) is not None:
        position = attribute[2]
    return data.index(b">", position)


def _meta(data: bytes, position: int) -> tuple[Encoding | None, int]:
    """What a `<meta>` tag declares (None: nothing), and the position of its '>'."""
    seen: set[bytes] = set()
    got_pragma, need_pragma = False, None
    charset: Encoding | None | bool = None  # False: an attribute named a charset the standard does not know
    while (attribute := _attribute(data, position)) is not None:
        name, value, position = attribute
        if name in seen:
            continue
        seen.add(name)
        if name == b"http-equiv":
            got_pragma = got_pragma or value == b"content-type"
        elif name == b"content" and charset is None:
            found = _charset_in_content(value)
            if found is not None:
                charset, need_pragma = found, True
        elif name == b"charset":
            charset, need_pragma = encoding_for(value.decode("latin-1")) or False, False
    position = data.index(b">", position)
    if need_pragma is None or (need_pragma and not got_pragma) or not isinstance(charset, Encoding):
        return None, position
    if charset.name in ("utf-16be", "utf-16le"):
        return UTF_8, position
    return (WINDOWS_1252 if charset.name == "x-user-defined" else charset), position


def _charset_in_content(value: bytes) -> Encoding | None:
    """The standard's "extract a character encoding from a meta element" (`text/html;
    charset=shift_jis`): the first `charset` followed by `=`, its value quoted or up to a
    space or `;`."""
    match = _CONTENT_CHARSET.search(value)
    if match is None:
        return None
    rest = value[match.end() :]
    if rest[:1] in (b'"', b"'"):
        end = rest.find(rest[:1], 1)
        return None if end < 0 else encoding_for(rest[1:end].decode("latin-1"))
    label = re.split(rb"[\t\n\x0c\r ;]", rest, maxsplit=1)[0]
    return encoding_for(label.decode("latin-1")) if label else None
