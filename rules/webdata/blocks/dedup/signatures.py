"""Phase 1 of dedup, once per shard: the signatures of its documents, as `.npy` files the
reduce (clusters.py) reads: a 128-bit hash of each document's normalised text, its
MinHash signature over word n-gram shingles (a batch of documents at once, with numpy),
and, for paragraph dedup, a 64-bit hash of each paragraph. Every hash is a pure function
of the text and the seed (BLAKE2b; splitmix64 mixing and seeded multiply-shift hashing),
never Python's salted `hash()`, so a shard gives the same bytes on any machine."""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rules.webdata.blocks.dedup.config import MAX_HASHES, DedupConfig, FuzzyDedup
from rules.webdata.blocks.documents import Document, paragraphs

BATCH_WORDS = 2**20  # words hashed in one numpy batch of a shard's map: ~50 MB of arrays
WORD_CACHE = 2**20  # distinct words whose hashes the map remembers before starting afresh
_WORD = re.compile(r"\w+")
U64 = np.uint64
_PAD = U64(0x5851F42D4C957F2D)  # the word a document shorter than a shingle is padded with
SHINGLE_STEP = U64(0x9E3779B97F4A7C15)

# What map_shard writes into its directory.
CONTENT = "content.npy"  # (documents, 2) uint64: the 128-bit hash of the normalised text
MINHASH = "minhash.npy"  # (bands, documents, rows) uint32: band-major, so a band is one read
PARAGRAPHS = "paragraphs.npy"  # (paragraphs,) uint64, the shard's paragraphs in order
PARAGRAPH_COUNTS = "paragraph_counts.npy"  # (documents,) uint32


# -- hashing ----------------------------------------------------------------------------------


def normalise(text: str) -> str:
    """The text exact dedup compares: Unicode NFKC, whitespace runs one space, stripped, so
    that two extractions of one page laid out apart are one document."""
    return " ".join(unicodedata.normalize("NFKC", text).split())


def _blake(text: str, size: int) -> bytes:
    return hashlib.blake2b(normalise(text).encode(), digest_size=size).digest()


def mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser over an array of uint64 (Steele et al. 2014): every output bit
    depends on every input bit."""
    x = x ^ (x >> U64(30))
    x *= U64(0xBF58476D1CE4E5B9)
    x ^= x >> U64(27)
    x *= U64(0x94D049BB133111EB)
    return x ^ (x >> U64(31))


def _hash_functions(fuzzy: FuzzyDedup) -> tuple[np.ndarray, np.ndarray]:
    """The seeded multiply-shift hash functions h(x) = (a x + b) >> 32 (a odd), derived by
    splitmix64 from the seed (not numpy's generators, whose streams may change)."""
    count = fuzzy.bands * fuzzy.rows
    base = np.arange(2 * count, dtype=U64) + U64(fuzzy.seed) * U64(2 * MAX_HASHES)
    values = mix(mix(base + U64(1)))
    return values[:count] | U64(1), values[count:]


class _WordHashes:
    """64-bit BLAKE2b hashes of words, remembered for the words of one shard."""

    def __init__(self) -> None:
        self._known: dict[str, int] = {}

    def of(self, words: list[str]) -> np.ndarray:
        known = self._known
        if len(known) > WORD_CACHE:
            known.clear()
        for word in set(words).difference(known):
            known[word] = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
        return np.fromiter(map(known.__getitem__, words), dtype=U64, count=len(words))


def _signatures(words: Sequence[np.ndarray], fuzzy: FuzzyDedup, functions: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """The MinHash signatures, (documents, bands x rows) uint32, of documents given as arrays
    of word hashes. A document shorter than a shingle is padded to one, so every document
    has at least one shingle (an empty one the same as every other empty one)."""
    n = fuzzy.ngram
    padded = [w if len(w) >= n else np.concatenate([w, np.full(n - len(w), _PAD)]) for w in words]
    lengths = np.fromiter(map(len, padded), dtype=np.int64, count=len(padded))
    flat = np.concatenate(padded)
    starts = len(flat) - n + 1
    shingles = flat[:starts].copy()
    for k in range(1, n):
        shingles = mix(shingles * SHINGLE_STEP ^ flat[k : starts + k])
    counts = lengths - n + 1  # the shingles starting inside each document
    offsets = np.concatenate([[0], np.cumsum(counts)[:-1]])
    first_word = np.cumsum(lengths) - lengths
    shingles = shingles[np.repeat(first_word - offsets, counts) + np.arange(counts.sum())]
    a, b = functions
    signatures = np.empty((len(words), len(a)), dtype=np.uint32)
    for j in range(len(a)):
        hashed = shingles * a[j]
        hashed += b[j]
        hashed >>= U64(32)
        signatures[:, j] = np.minimum.reduceat(hashed, offsets)
    return signatures


@dataclass(frozen=True)
class ShardSignatures:
    """What `map_shard` keeps of one shard's documents, in their order: the arrays of the
    files CONTENT, MINHASH, PARAGRAPHS and PARAGRAPH_COUNTS (the last three None when
    their dedup is off)."""

    content: np.ndarray
    minhash: np.ndarray | None = None
    paragraphs: np.ndarray | None = None
    paragraph_counts: np.ndarray | None = None

    def save(self, directory: Path) -> None:
        """Write the arrays as .npy files into `directory`, in C order (the reduce reads a band
        where it lies): the same arrays, the same bytes."""
        directory.mkdir(parents=True, exist_ok=True)
        for name, array in self._files().items():
            if array is not None:
                np.save(directory / name, np.ascontiguousarray(array), allow_pickle=False)

    def _files(self) -> dict[str, np.ndarray | None]:
        return {
            CONTENT: self.content,
            MINHASH: self.minhash,
            PARAGRAPHS: self.paragraphs,
            PARAGRAPH_COUNTS: self.paragraph_counts,
        }


class _MinHasher:
    """The MinHash signatures of a shard's documents, computed a batch of about BATCH_WORDS
    words at a time, so memory is a batch's arrays and the signatures, whatever the shard."""

    def __init__(self, fuzzy: FuzzyDedup):
        self.fuzzy = fuzzy
        self.functions = _hash_functions(fuzzy)
        self.words = _WordHashes()
        self.done: list[np.ndarray] = []
        self.batch: list[np.ndarray] = []
        self.batch_words = 0

    def add(self, text: str) -> None:
        self.batch.append(self.words.of(_WORD.findall(text.lower())))
        self.batch_words += len(self.batch[-1])
        if self.batch_words >= BATCH_WORDS:
            self._flush()

    def _flush(self) -> None:
        if self.batch:
            self.done.append(_signatures(self.batch, self.fuzzy, self.functions))
        self.batch, self.batch_words = [], 0

    def signatures(self) -> np.ndarray:
        """Every document's signature, band-major: (bands, documents, rows)."""
        self._flush()
        hashes = self.fuzzy.bands * self.fuzzy.rows
        found = np.concatenate(self.done) if self.done else np.empty((0, hashes), np.uint32)
        return found.reshape(len(found), self.fuzzy.bands, self.fuzzy.rows).transpose(1, 0, 2)


def map_shard(documents: Iterable[Document], config: DedupConfig, out: Path) -> int:
    """Write the signatures of one shard's `documents` into the directory `out`; the number
    of documents."""
    content: list[bytes] = []
    paragraph_hashes: list[bytes] = []
    paragraph_counts: list[int] = []
    minhasher = _MinHasher(config.fuzzy) if config.fuzzy else None
    for document in documents:
        content.append(_blake(document.text, 16))
        if config.paragraphs:
            found = paragraphs(document.text)
            paragraph_hashes += [_blake(paragraph, 8) for paragraph in found]
            paragraph_counts.append(len(found))
        if minhasher:
            minhasher.add(document.text)
    ShardSignatures(
        content=np.frombuffer(b"".join(content), dtype="<u8").reshape(len(content), 2),
        minhash=minhasher.signatures() if minhasher else None,
        paragraphs=np.frombuffer(b"".join(paragraph_hashes), dtype="<u8") if config.paragraphs else None,
        paragraph_counts=np.array(paragraph_counts, dtype="<u4") if config.paragraphs else None,
    ).save(out)
    return len(content)
