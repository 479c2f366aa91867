"""Copies of a remote store's outputs on this machine, by digest, for steps that read files.

    blobs/<dd>/<digest>        one read-only file per distinct content, BLAKE3-verified
    trees/<tree digest>/...    an output directory as hard links to its blobs

A tree is assembled in a temporary directory and renamed into place, so it exists only
complete. Blobs are shared by every tree (and every store) that holds the same bytes,
and are read-only so that a step cannot damage its inputs in place. Outputs built on
this machine are adopted (hard-linked) at publish, not downloaded again.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

from marinbuild.errors import OutputDamaged
from marinbuild.store.base import TransferringStore
from marinbuild.store.manifest import Manifest


class LocalCache:
    def __init__(self, root: Path):
        self.root = root

    def _blob(self, digest: str) -> Path:
        return self.root / "blobs" / digest[:2] / digest

    def _tree(self, manifest: Manifest) -> Path:
        return self.root / "trees" / manifest.tree_digest

    def _temporary(self, name: str) -> Path:
        directory = self.root / "tmp"
        directory.mkdir(parents=True, exist_ok=True)
        return directory / f"{name}.{uuid.uuid4().hex}"

    def _add_blob(self, path: Path, digest: str) -> None:
        blob = self._blob(digest)
        if blob.exists():
            return
        blob.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(path, 0o444)
        try:
            os.link(path, blob)
        except FileExistsError:
            pass

    def _assemble(self, manifest: Manifest) -> Path:
        tree = self._tree(manifest)
        if tree.exists():
            return tree
        staging = self._temporary(manifest.tree_digest)
        for item in manifest.files:
            target = staging / item.path
            target.parent.mkdir(parents=True, exist_ok=True)
            os.link(self._blob(item.digest), target)
        tree.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(staging, tree)
        except OSError:  # another builder assembled it first
            shutil.rmtree(staging, ignore_errors=True)
        return tree

    def adopt(self, directory: Path, manifest: Manifest) -> None:
        """Take freshly built outputs (already hashed) into the cache without copying."""
        for item in manifest.files:
            self._add_blob(directory / item.path, item.digest)
        self._assemble(manifest)

    def materialise(self, store: TransferringStore, prefix: str, manifest: Manifest) -> Path:
        """A local directory with the files of `manifest` stored under `prefix`, verified."""
        tree = self._tree(manifest)
        if tree.exists():
            return tree
        wanted = {item.digest: item for item in manifest.files if not self._blob(item.digest).exists()}
        downloads = {f"{prefix}/{item.path}": self._temporary(item.digest) for item in wanted.values()}
        sizes = {f"{prefix}/{item.path}": item.size for item in wanted.values()}
        digests = store.get_files(downloads, sum(sizes.values()), sizes)
        for (path, local), item in zip(downloads.items(), wanted.values()):
            if digests[local] != item.digest:  # the digest of the bytes written, as they landed
                local.unlink()
                raise OutputDamaged(f"{store.location(path)} does not match its manifest (corrupt); it was not used")
            self._add_blob(local, item.digest)
            local.unlink()
        return self._assemble(manifest)
