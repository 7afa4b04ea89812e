"""``python -m nas.validate``: the command lives in ``nas.cli.validate``."""

from nas.cli.validate import main

if __name__ == "__main__":
    main()
