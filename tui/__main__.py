"""`python -m edgespec_tui [options]` runs `edgespec chat [options]`."""

import sys

from .cli import main

sys.exit(main())
