"""`python -m gpuperf` is the `gpuperf` command."""

from gpuperf.cli import main

if __name__ == "__main__":
    main()
