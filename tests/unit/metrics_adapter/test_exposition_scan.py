"""The exposition scan fed chunk by chunk: the same samples whatever the chunking, and a
hostile body costs the scan bounded memory (long lines of unread series skipped, not held)."""

from __future__ import annotations

import itertools
import tracemalloc

import pytest
from hypothesis import given
from hypothesis import strategies as st

from metrics_adapter.errors import ScrapeError
from metrics_adapter.scraping.sources.exposition import (
    MAX_KEPT_LINE,
    ExpositionScan,
    TooManySeries,
    parse_exposition,
)

NEEDED = {"edl_gpu_utilization_ratio", "edl_trainer_samples_total"}.__contains__
Scanned = list[tuple[str, dict[str, str], float]]
BODY = (
    "# HELP edl_trainer_samples_total samples\n"
    "# TYPE edl_trainer_samples_total counter\n"
    "edl_trainer_samples_total 7\r\n"
    "process_cpu_seconds_total 3\n"
    "\n"
    "# TYPE edl_gpu_utilization_ratio gauge\n"
    'edl_gpu_utilization_ratio{gpu="0"} 0.5\n'
    'edl_gpu_utilization_ratio{gpu="1",model="é"} 0.25'  # no final newline
).encode()


def scanned(chunks: list[bytes], max_samples: int | None = None) -> Scanned:
    scan = ExpositionScan(NEEDED, max_samples)
    for chunk in chunks:
        scan.feed(chunk)
    return [(s.name, dict(s.labels), s.value) for s in scan.samples()]


@given(st.lists(st.integers(0, len(BODY)), max_size=12))
def test_any_chunking_gives_the_samples_of_the_whole_body(cuts: list[int]) -> None:
    edges = [0, *sorted(cuts), len(BODY)]
    chunks = [BODY[a:b] for a, b in itertools.pairwise(edges)]
    assert (
        scanned(chunks)
        == scanned([BODY])
        == [
            ("edl_trainer_samples_total", {}, 7.0),
            ("edl_gpu_utilization_ratio", {"gpu": "0"}, 0.5),
            ("edl_gpu_utilization_ratio", {"gpu": "1", "model": "é"}, 0.25),
        ]
    )


def test_a_long_line_of_a_series_nobody_reads_is_skipped_without_being_held() -> None:
    filler = b'process_junk_total{x="' + b"a" * (8 << 20) + b'"} 1\n'
    chunks = [filler[i : i + 65536] for i in range(0, len(filler), 65536)]
    scan = ExpositionScan(NEEDED)
    tracemalloc.start()
    try:
        for chunk in chunks:
            scan.feed(chunk)
        scan.feed(b"edl_trainer_samples_total 9\n")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [(s.name, s.value) for s in scan.samples()] == [("edl_trainer_samples_total", 9.0)]
    assert peak < 4 * MAX_KEPT_LINE  # not the 8 MB line


def test_a_long_line_of_a_needed_series_and_non_utf8_are_refused_as_parse_errors() -> None:
    long = b'edl_gpu_utilization_ratio{gpu="' + b"a" * MAX_KEPT_LINE + b'"} 1\n'
    for chunks in ([long], [long[i : i + 1000] for i in range(0, len(long), 1000)]):
        with pytest.raises(ScrapeError, match="a line over") as caught:
            scanned(chunks)
        assert caught.value.reason == "parse"
    with pytest.raises(ScrapeError, match="not UTF-8") as bad:
        scanned([b"edl_trainer_samples_total 1\n\xff\xfe\n"])
    assert bad.value.reason == "parse"


def test_too_many_needed_samples_stop_the_scan_as_they_arrive() -> None:
    lines = [f'edl_gpu_utilization_ratio{{gpu="{i}"}} 0.5\n'.encode() for i in range(600)]
    scan = ExpositionScan(NEEDED, max_samples=500)
    with pytest.raises(TooManySeries):
        for line in lines:
            scan.feed(line)
    assert parse_exposition("edl_trainer_samples_total 1\n", NEEDED, 1)[0].value == 1.0
