"""``python -m nas.predict``: the command lives in ``nas.cli.predict``."""

from nas.cli.predict import main

if __name__ == "__main__":
    main()
