"""``python -m nas.profile``: the command lives in ``nas.cli.profile``."""

from nas.cli.profile import main

if __name__ == "__main__":
    main()
