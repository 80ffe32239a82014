"""EDL per-pod agent: supervises the trainer, records and exports training metrics."""

from edl_common.version import edl_version

__version__ = edl_version()
