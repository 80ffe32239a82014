"""The NVML collector through its seam: a fake NVML, and the no-GPU path."""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pytest
from prometheus_client.registry import CollectorRegistry

from agent.collectors.gpu import GpuCollector, Nvml, open_nvml
from agent.collectors.health import CollectorHealth, GuardedCollector
from tests.unit.agent.helpers import scrape


class NVMLError_NotSupported(Exception):
    pass


@dataclass
class Rates:
    gpu: int
    memory: int


@dataclass
class Memory:
    total: int
    used: int
    free: int


class FakeNvml:
    """Two GPUs; GPU 1 cannot report power (NotSupported), like some boards."""

    def __init__(self, broken_memory: bool = False) -> None:
        self.broken_memory = broken_memory
        self.shut_down = False

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        return f"handle-{index}"

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        return Rates(gpu=87 if handle == "handle-0" else 0, memory=10)

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any:
        if self.broken_memory and handle == "handle-1":
            raise RuntimeError("GPU is lost")
        return Memory(total=80 * 2**30, used=2**30, free=79 * 2**30)

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        if handle == "handle-1":
            raise NVMLError_NotSupported()
        return 312_500  # milliwatts

    def nvmlShutdown(self) -> None:
        self.shut_down = True


def registry_for(nvml: Nvml | None, health: CollectorHealth) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GuardedCollector("gpu", GpuCollector(nvml, health), health))
    return registry


def test_fake_nvml_values_are_converted_to_base_units() -> None:
    health = CollectorHealth()
    values = scrape(registry_for(FakeNvml(), health))
    assert values["edl_gpu_devices"] == 2
    assert values['edl_gpu_utilization_ratio{gpu="0"}'] == pytest.approx(0.87)
    assert values['edl_gpu_utilization_ratio{gpu="1"}'] == 0
    assert values['edl_gpu_memory_total_bytes{gpu="0"}'] == 80 * 2**30
    assert values['edl_gpu_memory_used_bytes{gpu="1"}'] == 2**30
    assert values['edl_gpu_power_watts{gpu="0"}'] == pytest.approx(312.5)
    assert 'edl_gpu_power_watts{gpu="1"}' not in values  # not supported: left out, not zero
    assert health.errors("gpu") == 0


def test_a_failing_field_is_left_out_and_counted() -> None:
    health = CollectorHealth()
    values = scrape(registry_for(FakeNvml(broken_memory=True), health))
    assert 'edl_gpu_memory_used_bytes{gpu="1"}' not in values
    assert values['edl_gpu_memory_used_bytes{gpu="0"}'] == 2**30
    assert values['edl_gpu_utilization_ratio{gpu="1"}'] == 0
    assert health.errors("gpu") == 1


def test_no_gpu_exports_a_zero_count_and_no_per_gpu_series() -> None:
    values = scrape(registry_for(None, CollectorHealth()))
    assert values == {"edl_gpu_devices": 0}


def test_a_collector_that_raises_does_not_break_the_scrape() -> None:
    class Exploding(FakeNvml):
        def nvmlDeviceGetCount(self) -> int:
            raise RuntimeError("driver went away")

    health = CollectorHealth()
    assert scrape(registry_for(Exploding(), health)) == {}
    assert health.errors("gpu") == 1


def test_open_nvml_without_the_module_is_the_no_gpu_path() -> None:
    def no_module(name: str) -> ModuleType:
        raise ImportError(f"No module named {name!r}")

    nvml, note = open_nvml(no_module)
    assert nvml is None and "not installed" in note


def test_open_nvml_without_a_driver_is_the_no_gpu_path() -> None:
    class NVMLError_LibraryNotFound(Exception):
        pass

    module = ModuleType("pynvml")

    def init() -> None:
        raise NVMLError_LibraryNotFound("NVML Shared Library Not Found")

    module.nvmlInit = init  # type: ignore[attr-defined]
    nvml, note = open_nvml(lambda name: module)
    assert nvml is None and "NVML Shared Library Not Found" in note


def test_open_nvml_with_the_real_binding_on_this_machine() -> None:
    """Whatever this machine has, opening NVML must not raise and must say what happened."""
    nvml, note = open_nvml()
    assert note
    if nvml is not None:
        values = scrape(registry_for(nvml, CollectorHealth()))
        assert values["edl_gpu_devices"] >= 0
        nvml.nvmlShutdown()
