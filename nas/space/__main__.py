"""``python -m nas.space``: the command lives in ``nas.cli.space``."""

from nas.cli.space import main

if __name__ == "__main__":
    main()
