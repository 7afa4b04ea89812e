"""``python -m nas.repair``: the command lives in ``nas.cli.repair``."""

from nas.cli.repair import main

if __name__ == "__main__":
    main()
