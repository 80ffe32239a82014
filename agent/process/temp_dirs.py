"""The agent's temporary folders, and what to do when there is nowhere to put them.

A pod with a read-only root filesystem and no volume at /tmp has no writable temporary folder:
`tempfile` then fails with a bare FileNotFoundError. Here that becomes one line that says which
folder was wanted and the two ways out (a writable /tmp, or the option that names a folder).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from agent.errors import ConfigError


def temporary_dir(prefix: str, purpose: str, instead: str) -> Path:
    """A new folder under TMPDIR (else /tmp); `purpose` and `instead` word the error.

    Raises:
        ConfigError: no temporary folder is writable (say, a read-only root without /tmp).
    """
    try:
        return Path(tempfile.mkdtemp(prefix=prefix))
    except OSError as e:
        raise ConfigError(
            f"cannot create {purpose} in a temporary folder (TMPDIR, /tmp): "
            f"{e.strerror or e}; mount a writable /tmp (an emptyDir) or set {instead}"
        ) from e
