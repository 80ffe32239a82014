"""`python -m metrics_adapter` is `edl-adapter`."""

import sys

from metrics_adapter.cli import main

sys.exit(main())
