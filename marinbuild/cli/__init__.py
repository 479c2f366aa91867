"""The command line (click), and the display of a build as it runs."""
