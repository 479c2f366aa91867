"""marinbuild's version: in every entry's provenance, and in the package cache's fingerprint."""

__version__ = "0.1.0"
