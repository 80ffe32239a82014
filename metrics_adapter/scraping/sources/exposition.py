"""Prometheus text exposition to samples, with the real ``prometheus_client`` parser.

The body is scanned as it arrives (`ExpositionScan.feed`, one network chunk at a time): only
the sample lines of series the catalogue reads are kept, and the scan stops as soon as they
exceed ``max_samples``, so a target that invents label sets costs a bounded amount of memory
and CPU per scrape (the parser builds every sample of a family before yielding it). Nothing
else is held: not the body, not a list of its lines. A scrape of a few MB used to take some
40 MB at once (the chunks, the joined body, its text and its lines), memory that each scrape
thread's malloc arena kept afterwards; a hostile target grew the adapter that way.
Only the kept lines are parsed, in full, before anything is stored.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

from metrics_adapter.errors import ScrapeError
from metrics_adapter.scraping.store import Sample

_NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_NAME_BYTES_RE = re.compile(rb"\s*([a-zA-Z_:][a-zA-Z0-9_:]*)")

MAX_KEPT_LINE = 64 << 10
"""Bytes of one sample line of a series the catalogue reads (longer: the scrape is refused);
the lines of other series may be of any length and are skipped without being held."""


class TooManySeries(ScrapeError):
    """A scrape exposes more samples of the needed series than a pod may keep."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"more than {limit} samples of the catalogue's series", "too_many_series")
        self.limit = limit


class ExpositionScan:
    """Keeps the needed sample lines of a body fed chunk by chunk; `samples()` parses them.

    Raises (from `feed` and `samples`):
        TooManySeries: more than ``max_samples`` needed samples.
        ScrapeError: reason ``parse`` when the text is not valid exposition format (a line
            that is not UTF-8 included), or a needed line is over ``max_line`` bytes.
    """

    def __init__(
        self,
        keep: Callable[[str], bool],
        max_samples: int | None = None,
        max_line: int = MAX_KEPT_LINE,
    ) -> None:
        self._keep = keep
        self._max_samples = max_samples
        self._max_line = max_line
        self._partial = bytearray()
        self._skipping = False  # inside a long line of a series nobody reads
        self._kept: list[str] = []

    def feed(self, chunk: bytes) -> None:
        """The next bytes of the body."""
        pieces = chunk.split(b"\n")
        for piece in pieces[:-1]:
            if self._partial:
                self._extend(piece)
                line = bytes(self._partial)
                self._partial.clear()
            else:
                line = b"" if self._skipping else piece
            if not self._skipping:
                self._line(line)
            self._skipping = False
        self._extend(pieces[-1])

    def samples(self) -> list[Sample]:
        """Every kept sample, once the whole body was fed (exposition timestamps ignored)."""
        if self._partial and not self._skipping:
            self._line(bytes(self._partial))
        self._partial.clear()
        samples: list[Sample] = []
        try:
            for family in text_string_to_metric_families("\n".join(self._kept) + "\n"):
                for s in family.samples:
                    if self._keep(s.name):
                        samples.append(Sample(s.name, dict(s.labels), float(s.value)))
        except Exception as e:
            raise ScrapeError(f"invalid exposition format: {e}", "parse") from e
        return samples

    def _extend(self, piece: bytes) -> None:
        if self._skipping or not piece:
            return
        self._partial += piece
        if len(self._partial) <= self._max_line:
            return
        match = _NAME_BYTES_RE.match(self._partial)
        whole_name = match is not None and match.end() < len(self._partial)
        if match is not None and whole_name and not self._keep(match.group(1).decode()):
            self._partial.clear()  # a long line nobody reads: skipped up to its newline
            self._skipping = True
            return
        shown = bytes(self._partial[:60])
        raise ScrapeError(
            f"invalid exposition format: a line over {self._max_line} bytes ({shown!r}...)",
            "parse",
        )

    def _line(self, raw: bytes) -> None:
        try:
            line = raw.decode("utf-8").strip()
        except UnicodeDecodeError as e:
            raise ScrapeError("invalid exposition format: a line is not UTF-8", "parse") from e
        if not line or line[0] == "#":
            return
        match = _NAME_RE.match(line)
        if match is None:
            raise ScrapeError(
                f"invalid exposition format: no metric name in {line[:60]!r}", "parse"
            )
        if self._keep(match.group()):
            if len(raw) > self._max_line:
                raise ScrapeError(
                    f"invalid exposition format: a line over {self._max_line} bytes "
                    f"({line[:60]!r}...)",
                    "parse",
                )
            self._kept.append(line)
            if self._max_samples is not None and len(self._kept) > self._max_samples:
                raise TooManySeries(self._max_samples)


def parse_exposition(
    text: str, keep: Callable[[str], bool], max_samples: int | None = None
) -> list[Sample]:
    """All samples of ``text`` whose name ``keep`` accepts (see `ExpositionScan`)."""
    scan = ExpositionScan(keep, max_samples)
    scan.feed(text.encode())
    return scan.samples()
