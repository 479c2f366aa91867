"""Phase 3 of dedup, once per shard: its documents less what the clusters removed and the
paragraphs marked as repeats, and every member of a cluster (kept or removed, with its
cluster's id) for the cluster files a researcher inspects."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from marinbuild.targets.attrs import JsonValue
from marinbuild.targets.context import StepFailed
from rules.webdata.blocks.dedup.clusters import EXACT, KEEPS, NEAR, STATUS, ShardDecisions
from rules.webdata.blocks.documents import Document, paragraphs


@dataclass(frozen=True)
class ClusterMember:
    """A document of a cluster of two or more, as `find_clusters` decided: the first member,
    kept, or a duplicate removed. `cluster` is the first member's position in the stable
    order, the same in every shard's cluster file."""

    document: Document
    cluster: int
    status: str

    def to_json(self) -> dict[str, object]:
        return {"cluster": self.cluster, "status": self.status, **self.document.to_json()}


@dataclass
class Deduplication:
    """One shard's documents less what `find_clusters` removed, and its counts. A kept
    document that paragraph dedup leaves without a paragraph is dropped too (`emptied`),
    though its cluster file names it kept: all of its text is in earlier documents."""

    decisions: ShardDecisions
    documents: int = 0
    kept: int = 0
    removed: dict[str, int] = field(default_factory=lambda: {STATUS[EXACT]: 0, STATUS[NEAR]: 0})
    paragraphs_removed: int = 0
    emptied: int = 0  # kept documents every paragraph of which was a repeat

    def run(self, documents: Iterable[Document]) -> Iterator[Document | ClusterMember]:
        """Each document kept (its repeated paragraphs removed), and each cluster member (a
        kept one is yielded as both), in the shard's order."""
        decisions = np.load(self.decisions.clusters)
        marks = np.load(self.decisions.paragraphs) if self.decisions.paragraphs else None
        at = 0
        for position, document in enumerate(documents):
            if position >= len(decisions):
                raise StepFailed(f"the shard has more documents than its decisions ({len(decisions)})")
            self.documents += 1
            cluster, status = int(decisions["cluster"][position]), int(decisions["status"][position])
            if cluster >= 0:
                yield ClusterMember(document, cluster, STATUS[status])
            if marks is not None:
                found = paragraphs(document.text)
                repeated, at = marks[at : at + len(found)], at + len(found)
                if status in KEEPS and repeated.any():
                    self.paragraphs_removed += int(repeated.sum())
                    left = [paragraph for paragraph, drop in zip(found, repeated) if not drop]
                    if not left:
                        self.emptied += 1
                        continue
                    document = replace(document, text="\n\n".join(left))
            if status in KEEPS:
                self.kept += 1
                yield document
            else:
                self.removed[STATUS[status]] += 1
        if self.documents != len(decisions) or (marks is not None and at != len(marks)):
            raise StepFailed(f"the shard's {self.documents} documents are not those its decisions were made for")

    def to_json(self) -> Mapping[str, JsonValue]:
        return {
            "documents": self.documents,
            "kept": self.kept,
            "removed": dict(self.removed),
            "paragraphs_removed": self.paragraphs_removed,
            "emptied": self.emptied,
        }
