"""Layer 6: the command line (click), and the live display of a build (rich)."""
