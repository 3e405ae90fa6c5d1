"""`python -m regroup.cli ...`: the same as the `regroup` console script."""

from regroup.cli.main import main

if __name__ == "__main__":
    main()
