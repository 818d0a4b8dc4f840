"""`python -m acesql`: the `acesql` command line (acesql/cli/)."""

from acesql.cli import main

main()
