"""``python -m simctl`` runs the same program as the ``simctl`` command."""

from simctl.cli import main

if __name__ == "__main__":
    main()
