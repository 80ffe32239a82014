"""Prints the requirements of pyproject.toml (core + the extras named), one per line.

The images install these in a layer of their own before the source is copied, so a code
change rebuilds only the small layer that installs EDL itself. `EDL_PADDLE_REQUIREMENT`
(e.g. `paddlepaddle-gpu==3.3.1`) replaces the extras' `paddlepaddle` requirement;
`EDL_SKIP_REQUIREMENTS` (names, comma-separated) leaves requirements out (the torch image's
torch, which is copied in, not installed by pip).
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
skipped = {n.strip().lower() for n in os.environ.get("EDL_SKIP_REQUIREMENTS", "").split(",")}
wanted = [r for r in wanted if re.split(r"[\s<>=!~\[;]", r, maxsplit=1)[0].lower() not in skipped]
print("\n".join(wanted))
