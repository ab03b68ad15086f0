"""``python -m asaptrace.cli``."""

from asaptrace.cli.app import main

main()
