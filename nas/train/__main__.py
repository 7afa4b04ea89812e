"""``python -m nas.train``: the command lives in ``nas.cli.train``."""

from nas.cli.train import main

if __name__ == "__main__":
    main()
