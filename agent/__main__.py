"""`python -m agent` is `edl-agent`."""

import sys

from agent.cli import main

sys.exit(main())
