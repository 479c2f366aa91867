"""Layer 2: packages. The workspace, its BUILD.marin files, and loading them into targets."""

from marinbuild.packages.loader import Package, PackageLoader
from marinbuild.packages.workspace import BUILD_FILE, Workspace, open_workspace

__all__ = ["BUILD_FILE", "Package", "PackageLoader", "Workspace", "open_workspace"]
