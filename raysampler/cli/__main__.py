"""`python -m raysampler.cli`: the `raysampler` command."""

import sys

from .parser import main

if __name__ == "__main__":
    sys.exit(main())
