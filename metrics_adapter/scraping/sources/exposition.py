"""Prometheus text exposition to samples, with the real ``prometheus_client`` parser.

A cheap line scan runs first: it keeps only the sample lines of series the catalogue reads and
stops as soon as they exceed ``max_samples``, so a target that invents label sets costs a
bounded amount of memory and CPU per scrape (the parser builds every sample of a family before
yielding it). Only the kept lines are parsed, in full, before anything is stored.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

from metrics_adapter.errors import ScrapeError
from metrics_adapter.scraping.store import Sample

_NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


class TooManySeries(ScrapeError):
    """A scrape exposes more samples of the needed series than a pod may keep."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"more than {limit} samples of the catalogue's series", "too_many_series")
        self.limit = limit


def parse_exposition(
    text: str, keep: Callable[[str], bool], max_samples: int | None = None
) -> list[Sample]:
    """All samples of ``text`` whose name ``keep`` accepts (exposition timestamps ignored).

    Raises:
        TooManySeries: more than ``max_samples`` such samples.
        ScrapeError: reason ``parse`` when the text is not valid exposition format.
    """
    kept: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] == "#":
            continue
        match = _NAME_RE.match(line)
        if match is None:
            raise ScrapeError(
                f"invalid exposition format: no metric name in {line[:60]!r}", "parse"
            )
        if keep(match.group()):
            kept.append(line)
            if max_samples is not None and len(kept) > max_samples:
                raise TooManySeries(max_samples)
    samples: list[Sample] = []
    try:
        for family in text_string_to_metric_families("\n".join(kept) + "\n"):
            for s in family.samples:
                if keep(s.name):
                    samples.append(Sample(s.name, dict(s.labels), float(s.value)))
    except Exception as e:
        raise ScrapeError(f"invalid exposition format: {e}", "parse") from e
    return samples
