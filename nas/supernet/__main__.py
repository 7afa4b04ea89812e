"""``python -m nas.supernet``: the command lives in ``nas.cli.supernet``."""

from nas.cli.supernet import main

if __name__ == "__main__":
    main()
