"""`python -m chaos.proxy.toxiproxy [--host H] [--port N] [--config FILE]`."""

import sys

from .cli import main

sys.exit(main())
