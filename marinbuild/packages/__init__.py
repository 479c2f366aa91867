"""Packages: the workspace, the rules its BUILD files may call, and loading BUILD files into targets."""

from marinbuild.packages.loader import Package, PackageLoader
from marinbuild.packages.workspace import BUILD_FILE, Workspace, open_workspace

__all__ = ["BUILD_FILE", "Package", "PackageLoader", "Workspace", "open_workspace"]
