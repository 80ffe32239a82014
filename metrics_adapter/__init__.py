"""EDL metrics adapter: Kubernetes custom and external metrics APIs for training jobs."""

from edl_common.version import edl_version

__version__ = edl_version()
