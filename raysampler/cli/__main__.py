"""`python -m raysampler.cli`: the `raysampler` command."""

import sys

from .parser import main

sys.exit(main())
