"""``python -m nas.export``: the command lives in ``nas.cli.export``."""

from nas.cli.export import main

if __name__ == "__main__":
    main()
