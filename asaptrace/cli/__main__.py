"""``python -m asaptrace.cli``."""

from asaptrace.cli.app import main

if __name__ == "__main__":  # the dashboard's spawned workers import this module again: run nothing then
    main()
