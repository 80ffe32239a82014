"""`python -m agent` is `edl-agent`."""

import sys

from agent.process.cli import main

sys.exit(main())
