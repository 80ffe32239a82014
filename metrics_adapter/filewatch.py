"""FileWatcher: notices when a file's content changes (polling; works on ConfigMap mounts)."""

from __future__ import annotations

import hashlib
from pathlib import Path


class FileWatcher:
    """Reports a change when the file's content hash differs from the last one seen."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._digest: str | None = None

    def _read_digest(self) -> str | None:
        try:
            return hashlib.sha256(self.path.read_bytes()).hexdigest()
        except OSError:
            return None

    def prime(self) -> None:
        """Remember the current content as seen."""
        self._digest = self._read_digest()

    def changed(self) -> bool:
        """True once per content change (a missing file is no change)."""
        digest = self._read_digest()
        if digest is None or digest == self._digest:
            return False
        self._digest = digest
        return True
