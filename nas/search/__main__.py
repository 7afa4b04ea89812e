"""``python -m nas.search``: the command lives in ``nas.cli.search``."""

from nas.cli.search import main

if __name__ == "__main__":
    main()
