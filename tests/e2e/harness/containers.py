"""podman's settings for running EDL's images on this machine (`podman run`, no cluster).

tests/e2e/install/test_images.py and bench/bench_container_leave.py run the images directly
under podman with runtime runc and the host network; the pods of the e2e cluster run on the
kubelet nodes (tests/e2e/harness/kubelet_node.py), not here.
"""

from __future__ import annotations

import resource


def containers_conf(runtime: str) -> str:
    """runc, cgroupfs, file events, and ulimits this sandbox allows (podman's default nofile
    of 1048576 is above its hard limit: "setrlimit RLIMIT_NOFILE: Operation not permitted")."""
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nproc = min(resource.getrlimit(resource.RLIMIT_NPROC)[1], 32768)
    return (
        "[containers]\n"
        f'default_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]\n'
        "[engine]\n"
        f'runtime = "{runtime}"\n'
        'cgroup_manager = "cgroupfs"\n'
        'events_logger = "file"\n'
    )
