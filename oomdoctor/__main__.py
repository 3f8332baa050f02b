"""`python -m oomdoctor` runs the CLI."""

from oomdoctor.cli import main

main()
