"""EDL per-pod agent: supervises the trainer, records and exports training metrics."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("edl")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"
