"""Helpers shared by the agent's unit tests (fakes and a scrape; no tests, no fixtures)."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from agent.protocol.trainer_world import TrainerWorld


def scrape(registry: CollectorRegistry) -> dict[str, float]:
    """Renders the registry as the exporter does and parses it back: {sample{labels}: value}."""
    text = generate_latest(registry).decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out


class StubTrainer:
    """The supervised trainer as the exporter's collectors see it: rank 1 of 2, not running."""

    world = TrainerWorld(rank=1, world_size=2, generation=4)
    pid: int | None = None
    starts = 0
