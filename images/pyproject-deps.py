"""Prints the requirements of pyproject.toml (core + the extras named), one per line.

The images install these in a layer of their own before the source is copied, so a code
change rebuilds only the small layer that installs EDL itself. `EDL_PADDLE_REQUIREMENT`
(e.g. `paddlepaddle-gpu==3.3.1`) replaces the extras' `paddlepaddle` requirement.
"""

import os
import re
import sys
import tomllib

with open(sys.argv[1], "rb") as f:
    project = tomllib.load(f)["project"]
wanted = list(project["dependencies"])
for extra in sys.argv[2:]:
    wanted += project["optional-dependencies"][extra]
paddle = os.environ.get("EDL_PADDLE_REQUIREMENT", "").strip()
if paddle:
    wanted = [paddle if re.match(r"paddlepaddle\b(?!-)", r) else r for r in wanted]
print("\n".join(wanted))
