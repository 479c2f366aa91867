"""`python -m marinbuild`: the `marinbuild` command (cli/main.py)."""

from marinbuild.cli.main import main

main()
