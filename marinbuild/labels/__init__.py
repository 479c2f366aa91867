"""Labels: the names of targets (`//pkg:name`) and command-line target patterns."""

from marinbuild.labels.label import Label, parse_label
from marinbuild.labels.pattern import PatternKind, TargetPattern, matches_patterns, parse_pattern

__all__ = ["Label", "PatternKind", "TargetPattern", "matches_patterns", "parse_label", "parse_pattern"]
