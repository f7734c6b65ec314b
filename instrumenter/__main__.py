"""``python -m instrumenter`` is the ``autoitt`` command."""

from instrumenter.cli import main

if __name__ == "__main__":
    main()
