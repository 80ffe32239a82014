"""`python -m examples.demo`: the embedded demo (`make demo`)."""

import sys

from examples.demo.cli import main

sys.exit(main())
