"""``python -m kvcalc``."""

from kvcalc.cli import main

main()
