"""Prometheus text exposition to samples, with the real ``prometheus_client`` parser."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

from metrics_adapter.errors import ScrapeError
from metrics_adapter.store import Sample


def parse_exposition(text: str, keep: Callable[[str], bool]) -> list[Sample]:
    """All samples of ``text`` whose name ``keep`` accepts (exposition timestamps ignored).

    Raises:
        ScrapeError: reason ``parse`` when the text is not valid exposition format.
    """
    samples: list[Sample] = []
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if keep(s.name):
                    samples.append(Sample(s.name, dict(s.labels), float(s.value)))
    except Exception as e:
        raise ScrapeError(f"invalid exposition format: {e}", "parse") from e
    return samples
