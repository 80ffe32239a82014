"""`python -m metrics_adapter` is `edl-adapter`."""

import sys

from metrics_adapter.entry import main

sys.exit(main())
