"""``python -m nas.export``: the command lives in ``nas.cli.export``."""

from nas.cli.export import main

main()
