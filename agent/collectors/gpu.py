"""GPU figures from NVML, read through an injected NVML-like object.

Policy: NVML is opened once by the composition root (`open_nvml`), never at import. No NVML
(no `pynvml` module, no driver, no GPU) is a normal state, not an error: the collector then
exports `edl_gpu_devices 0` and no per-GPU series; it never invents numbers. A field a GPU does
not support (NVML's NotSupported, e.g. power on some boards) is left out for that GPU; any
other per-field failure is left out and counted in `edl_agent_collector_errors_total`.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any, Protocol

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from agent.collectors.health import CollectorHealth

log = logging.getLogger(__name__)


class Nvml(Protocol):
    """The part of `pynvml` (nvidia-ml-py) the collector uses; tests pass a fake."""

    def nvmlDeviceGetCount(self) -> int: ...  # noqa: D102
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...  # noqa: D102
    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any: ...  # noqa: D102
    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any: ...  # noqa: D102
    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int: ...  # noqa: D102
    def nvmlShutdown(self) -> None: ...  # noqa: D102


def open_nvml(
    importer: Callable[[str], ModuleType] = importlib.import_module,
) -> tuple[Nvml | None, str]:
    """Imports and initialises NVML; returns (nvml or None, a line saying what happened)."""
    try:
        module: Any = importer("pynvml")
    except ImportError as e:
        return None, f"no GPU metrics: nvidia-ml-py is not installed ({e})"
    try:
        module.nvmlInit()
    except Exception as e:  # pynvml.NVMLError_LibraryNotFound, _DriverNotLoaded, ...
        return None, f"no GPU metrics: NVML is not available ({e})"
    nvml: Nvml = module
    return nvml, "NVML initialised"


def _not_supported(e: Exception) -> bool:
    return type(e).__name__ == "NVMLError_NotSupported"


class GpuCollector(Collector):
    """Exports `edl_gpu_devices` and, per GPU index, utilisation, memory and power."""

    NAME = "gpu"

    def __init__(self, nvml: Nvml | None, health: CollectorHealth) -> None:
        self._nvml = nvml
        self._health = health

    def collect(self) -> Iterable[Metric]:
        """Yields the GPU families (only the count when there is no NVML)."""
        count = GaugeMetricFamily(
            "edl_gpu_devices", "GPUs NVML sees; 0 when there is no GPU or no NVML."
        )
        if self._nvml is None:
            count.add_metric([], 0)
            return [count]
        nvml = self._nvml
        n = int(nvml.nvmlDeviceGetCount())
        count.add_metric([], n)
        util = GaugeMetricFamily(
            "edl_gpu_utilization_ratio",
            "NVML GPU utilisation: share of the last sample period a kernel ran, 0-1.",
            labels=["gpu"],
        )
        used = GaugeMetricFamily(
            "edl_gpu_memory_used_bytes", "NVML device memory used.", labels=["gpu"]
        )
        total = GaugeMetricFamily(
            "edl_gpu_memory_total_bytes", "NVML device memory total.", labels=["gpu"]
        )
        power = GaugeMetricFamily("edl_gpu_power_watts", "NVML power draw.", labels=["gpu"])
        for i in range(n):
            label = [str(i)]
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            rates = self._read(nvml.nvmlDeviceGetUtilizationRates, handle)
            if rates is not None:
                util.add_metric(label, float(rates.gpu) / 100.0)
            mem = self._read(nvml.nvmlDeviceGetMemoryInfo, handle)
            if mem is not None:
                used.add_metric(label, float(mem.used))
                total.add_metric(label, float(mem.total))
            milliwatts = self._read(nvml.nvmlDeviceGetPowerUsage, handle)
            if milliwatts is not None:
                power.add_metric(label, float(milliwatts) / 1000.0)
        return [count, util, used, total, power]

    def _read(self, field: Callable[[Any], Any], handle: Any) -> Any:
        try:
            return field(handle)
        except Exception as e:
            if not _not_supported(e):
                log.debug("NVML read failed: %s", e)
                self._health.record_error(self.NAME)
            return None
