"""`python -m regen`: the same as the `regen` command."""

import sys

from .cli import main

sys.exit(main())
