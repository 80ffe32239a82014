"""How a job's throughput grows with workers: the Universal Scalability Law, fitted per job.

    X(n) = lambda * n / (1 + sigma * (n - 1) + kappa * n * (n - 1))

``sigma`` is contention (the serial share), ``kappa`` coherency (the cost every pair of
workers adds, e.g. the all-reduce), ``lambda`` one worker's throughput. Decisions only
use ratios (speed-up S(n) = X(n) / X(1)), so lambda cancels and a job never measured still
has a curve: the prior's.

The fit is linear least squares on n / X(n) = a + b (n - 1) + c n (n - 1) with a = 1/lambda,
b = sigma/lambda, c = kappa/lambda, constrained to b, c >= 0, plus two prior rows that pull
sigma and kappa towards the prior with the weight of ``prior_weight`` observations at the
largest size seen. With fewer than two sizes the prior's sigma and kappa are used as they
are (one size only fixes lambda); with two, only sigma is fitted (two sizes cannot tell
contention from coherency, and a kappa fitted from them predicts a fall-off no size showed).

The default prior has no coherency cost (kappa 0): until the data show throughput falling
off, none is assumed. The asymmetry is why: an optimistic prior costs one measured step
and a shrink when it is wrong, while a pessimistic one is never corrected, because the job
is never measured at the sizes it rules out (Pollux's fit prefers the optimistic model for
the same reason).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ScalingPrior:
    """What is assumed before a job has been measured at two sizes."""

    sigma: float = 0.05
    kappa: float = 0.0
    """No retrogression assumed until measured (see the module docstring)."""
    weight: float = 0.1
    """How many observations (at the largest size seen) the prior is worth once data exist."""


@dataclass(frozen=True, slots=True)
class ScalingCurve:
    """A fitted (or prior) USL curve."""

    sigma: float
    kappa: float
    lam: float | None = None
    """One worker's throughput (samples/s); None when the job was never measured."""
    sizes: int = 0
    """Distinct sizes the fit rests on (0 or 1: the prior's shape)."""
    largest: int = 0
    """Largest size measured (0: none)."""

    def speedup(self, n: int) -> float:
        """S(n) = X(n) / X(1); 0 for n <= 0."""
        if n <= 0:
            return 0.0
        return n / (1.0 + self.sigma * (n - 1) + self.kappa * n * (n - 1))

    def marginal(self, n: int) -> float:
        """What worker n + 1 adds, relative to one worker: S(n + 1) - S(n)."""
        return self.speedup(n + 1) - self.speedup(n)

    def throughput(self, n: int) -> float | None:
        """Predicted samples/s at ``n`` workers (None: never measured)."""
        return None if self.lam is None else self.lam * self.speedup(n)


def fit_usl(observed: Mapping[int, float], prior: ScalingPrior = ScalingPrior()) -> ScalingCurve:
    """Fit the curve to measured throughput per size (sizes < 1 and values <= 0 ignored)."""
    points = sorted((n, x) for n, x in observed.items() if n >= 1 and x > 0 and math.isfinite(x))
    if not points:
        return ScalingCurve(prior.sigma, prior.kappa)
    largest = points[-1][0]
    if len(points) == 1:
        n, x = points[0]
        shape = ScalingCurve(prior.sigma, prior.kappa)
        return ScalingCurve(prior.sigma, prior.kappa, x / shape.speedup(n), 1, largest)
    scale = sum(n / x for n, x in points) / len(points)
    w = math.sqrt(max(prior.weight, 0.0))
    if len(points) < 3:
        # Two sizes cannot tell contention from coherency: the prior's kappa is kept and
        # only sigma is fitted, so retrogression is assumed only once three sizes show it.
        k = prior.kappa
        rows = [((1.0 + k * n * (n - 1.0), n - 1.0, 0.0), n / x / scale) for n, x in points]
        rows.append(((-prior.sigma * w * (largest - 1), w * (largest - 1), 0.0), 0.0))
        a, b, _ = _nonnegative_least_squares(rows, fit_kappa=False)
        c = k * a
    else:
        rows = [((1.0, n - 1.0, n * (n - 1.0)), n / x / scale) for n, x in points]
        rows.append(((-prior.sigma * w * (largest - 1), w * (largest - 1), 0.0), 0.0))
        rows.append(
            ((-prior.kappa * w * largest * (largest - 1), 0.0, w * largest * (largest - 1)), 0.0)
        )
        a, b, c = _nonnegative_least_squares(rows)
    if a <= 0:
        return ScalingCurve(prior.sigma, prior.kappa, None, len(points), largest)
    return ScalingCurve(b / a, c / a, 1.0 / (a * scale), len(points), largest)


_Row = tuple[tuple[float, float, float], float]


def _nonnegative_least_squares(
    rows: list[_Row], fit_kappa: bool = True
) -> tuple[float, float, float]:
    """Minimise ||A theta - y|| with b, c >= 0, trying each of the 4 active sets.

    Without ``fit_kappa`` c stays 0 (only the 2 sets with c fixed are tried).
    """
    best: tuple[float, tuple[float, float, float]] | None = None
    kappa_sets = (True, False) if fit_kappa else (False,)
    for free_b, free_c in itertools.product((True, False), kappa_sets):
        keep = [0] + ([1] if free_b else []) + ([2] if free_c else [])
        solved = _least_squares(rows, keep)
        if solved is None or solved[1] < -1e-12 or solved[2] < -1e-12:
            continue
        theta = (solved[0], max(0.0, solved[1]), max(0.0, solved[2]))
        residual = sum((sum(r[i] * theta[i] for i in range(3)) - y) ** 2 for r, y in rows)
        if best is None or residual < best[0] - 1e-15:
            best = (residual, theta)
    return best[1] if best is not None else (0.0, 0.0, 0.0)


def _least_squares(rows: list[_Row], keep: list[int]) -> tuple[float, float, float] | None:
    """Unconstrained least squares over the columns in ``keep`` (normal equations)."""
    k = len(keep)
    ata = [[sum(r[keep[i]] * r[keep[j]] for r, _ in rows) for j in range(k)] for i in range(k)]
    aty = [sum(r[keep[i]] * y for r, y in rows) for i in range(k)]
    solution = _solve(ata, aty)
    if solution is None:
        return None
    theta = [0.0, 0.0, 0.0]
    for i, column in enumerate(keep):
        theta[column] = solution[i]
    return theta[0], theta[1], theta[2]


def _solve(matrix: list[list[float]], rhs: list[float]) -> list[float] | None:
    """Gaussian elimination with partial pivoting; None when singular."""
    n = len(rhs)
    m = [[*row, rhs[i]] for i, row in enumerate(matrix)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[pivot][col]) < 1e-14:
            return None
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(col + 1, n):
            f = m[r][col] / m[col][col]
            for c in range(col, n + 1):
                m[r][c] -= f * m[col][c]
    x = [0.0] * n
    for r in range(n - 1, -1, -1):
        x[r] = (m[r][n] - sum(m[r][c] * x[c] for c in range(r + 1, n))) / m[r][r]
    return x


_PLACED_CACHE = 65536
"""Placements one model remembers (:meth:`SizeModel.placed_speedup`); then it starts over."""


class SizeModel:
    """What the sizer predicts for a job at each size and placement.

    Real curves are not smooth: a job near-linear on one node can *lose* speed when it first
    spans two (bert 38.7 -> 14.3 samples/s from 4 to 5 GPUs), and the same workers train at
    very different speeds depending on how many nodes they span (bert, 2 workers: 20.5
    samples/s on one node, 9.1 on two). So the model is

    * **packed** (a size on the fewest nodes that hold it, ``ceil(n / per_node)``; the
      placement growth plans first): the measured throughput at a measured size (the truth
      beats any fit); elsewhere the USL fit of the sizes that fit on one node
      (``per_node`` workers), times a *span factor* for sizes that need more nodes: the
      geometric mean of measured/fitted over the measured multi-node sizes (1 until one is
      measured: optimistic, as the prior; the first multi-node measurement corrects it);
      that curve is then corrected by the measured/predicted ratio of the neighbouring
      measured sizes (interpolated between two, the nearest one's outside them), so the
      prediction meets every measurement without jumps and keeps the fit's shape between
      them. A measurement whose placement is not known counts as packed.
    * **spread** (more nodes than packed, :meth:`placed_speedup`): measured where measured;
      elsewhere the packed prediction times measured/packed of the job's spread
      measurements on as many nodes (else the nearest count of nodes), interpolated in
      workers; before any, the span factor (at most 1: what crossing a node boundary cost
      its packed sizes). On 4-GPU nodes two workers across two nodes can lose half their
      speed while seven across four gain half (yolov3: 12.9 against 26.0; 61.6 against
      40.6 packed): one factor for every spread placement would be wrong for both.
    * **noise**: a measured size slower than a smaller one by no more than the two
      measurements' spread (``spread``, relative) is taken as fast as that one: two
      measurements within their spread are not a loss.

    Speed-ups are relative to the predicted one-worker throughput; a job never measured has
    the prior's USL shape (no span cost assumed).
    """

    def __init__(
        self,
        observed: Mapping[int, float],
        per_node: int,
        prior: ScalingPrior = ScalingPrior(),
        placed: Mapping[tuple[int, int], float] | None = None,
        spread: float = 0.0,
    ) -> None:
        self.per_node = max(1, per_node)
        packed: dict[int, float] = {}
        self.spread_points: dict[tuple[int, int], float] = {}
        """(workers, nodes) -> samples/s measured on more nodes than packed."""
        for (n, k), x in sorted((placed or {}).items()):
            if n < 1 or not (x > 0 and math.isfinite(x)):
                continue
            if k > self.packed_nodes(n):
                self.spread_points[(n, k)] = x
            else:
                packed[n] = x
        for n, x in observed.items():
            if n >= 1 and x > 0 and math.isfinite(x) and n not in packed:
                packed[n] = x
        points = _within_noise(packed, spread)
        self.points = points
        """Size -> samples/s measured packed (dips within the noise lifted)."""
        local = {n: x for n, x in points.items() if n <= self.per_node}
        self.curve = fit_usl(points, prior)
        """The USL fit of every measured size (what the debug view and metrics show)."""
        self._base = fit_usl(local, prior) if local else self.curve
        self.span_factor = 1.0
        """Measured over fitted at sizes spanning more than one node (1: none measured)."""
        spanning = [
            x / t
            for n, x in points.items()
            if n > self.per_node and local and (t := self._base.throughput(n) or 0.0) > 0
        ]
        if spanning:
            self.span_factor = math.exp(sum(math.log(r) for r in spanning) / len(spanning))
        self._sizes = sorted(points)
        self._largest = max([*points, *(n for n, _ in self.spread_points)], default=0)
        self._residual = {n: x / r for n, x in points.items() if (r := self._raw(n)) > 0}
        self._one = self._predict(1)
        self._cache: dict[int, float] = {}
        self._placed_cache: dict[tuple[int, int], float] = {}
        """(workers, nodes) -> :meth:`placed_speedup` (the decision asks for the same ones
        many times a round, and rounds share the model)."""
        self._spread_ratios: dict[int, list[tuple[int, float]]] = {}
        """Nodes -> (workers, measured over packed) of the spread measurements."""
        for (n, k), x in sorted(self.spread_points.items()):
            if (t := self._predict(n)) > 0:
                self._spread_ratios.setdefault(k, []).append((n, x / t))
        ratios = [r for by_n in self._spread_ratios.values() for _, r in by_n]
        self.spread_factor = (
            math.exp(sum(math.log(r) for r in ratios) / len(ratios))
            if ratios
            else min(1.0, self.span_factor)
        )
        """Spread over packed over every spread measurement, or before any the span factor
        (<= 1)."""

    def packed_nodes(self, n: int) -> int:
        """The fewest nodes that hold ``n`` workers."""
        return max(1, -(-n // self.per_node))

    @property
    def largest(self) -> int:
        """Largest size measured, on any placement (0: none)."""
        return self._largest

    def _raw(self, n: int) -> float:
        lam = self._base.lam if self._base.lam is not None else 1.0
        value = lam * self._base.speedup(n)
        return value * self.span_factor if n > self.per_node else value

    def _predict(self, n: int) -> float:
        measured = self.points.get(n)
        if measured is not None:
            return measured
        raw = self._raw(n)
        sizes = [m for m in self._sizes if m in self._residual]
        if not sizes:
            return raw
        below = [m for m in sizes if m < n]
        above = [m for m in sizes if m > n]
        if below and above:
            low, high = below[-1], above[0]
            r0, r1 = self._residual[low], self._residual[high]
            return raw * (r0 + (r1 - r0) * (n - low) / (high - low))
        return raw * self._residual[below[-1] if below else above[0]]

    def throughput(self, n: int) -> float | None:
        """Predicted samples/s at ``n`` workers packed (None: never measured)."""
        if n <= 0 or not self.points:
            return None
        return self._predict(n)

    def speedup(self, n: int) -> float:
        """Predicted X(n) / X(1), packed; 0 for n <= 0."""
        if n <= 0:
            return 0.0
        cached = self._cache.get(n)
        if cached is None:
            cached = self._cache[n] = self._predict(n) / self._one if self._one > 0 else 0.0
        return cached

    def placed_speedup(self, n: int, nodes: int) -> float:
        """Predicted X(n workers on ``nodes`` nodes) / X(1); packed when ``nodes`` is not more."""
        cached = self._placed_cache.get((n, nodes))
        if cached is None:
            if len(self._placed_cache) >= _PLACED_CACHE:
                self._placed_cache.clear()
            cached = self._placed_cache[(n, nodes)] = self._placed_speedup(n, nodes)
        return cached

    def _placed_speedup(self, n: int, nodes: int) -> float:
        if n <= 0:
            return 0.0
        if nodes <= self.packed_nodes(n):
            return self.speedup(n)
        measured = self.spread_points.get((n, nodes))
        if measured is not None:
            return measured / self._one if self._one > 0 else 0.0
        return self.speedup(n) * self._spread_ratio(n, nodes)

    def _spread_ratio(self, n: int, nodes: int) -> float:
        """Spread over packed at ``n`` workers on ``nodes`` nodes.

        From the measurements on as many nodes (else the nearest count of nodes, the larger
        on a tie), interpolated in workers between the nearest two (the nearest one's
        outside them).
        """
        if not self._spread_ratios:
            return self.spread_factor
        k = min(self._spread_ratios, key=lambda m: (abs(m - nodes), -m))
        by_n = self._spread_ratios[k]
        below = [(m, r) for m, r in by_n if m <= n]
        above = [(m, r) for m, r in by_n if m > n]
        if below and above:
            (m0, r0), (m1, r1) = below[-1], above[0]
            return r0 + (r1 - r0) * (n - m0) / (m1 - m0)
        return (below[-1] if below else above[0])[1]

    def measured(self, n: int, nodes: int) -> bool:
        """Whether ``n`` workers on ``nodes`` nodes were measured (packed: at that size)."""
        if nodes <= self.packed_nodes(n):
            return n in self.points
        return (n, nodes) in self.spread_points

    def marginal(self, n: int) -> float:
        """What worker n + 1 adds, relative to one worker: S(n + 1) - S(n)."""
        return self.speedup(n + 1) - self.speedup(n)

    def ahead(self, n: int, limit: int) -> tuple[float, int]:
        """The best mean gain per added worker from ``n`` and the size that gives it.

        Over sizes n+1 .. ``limit``: a dip (a node boundary crossed at a loss) is looked
        across, so growth jumps to a size that pays instead of stopping in front of it.
        Ties go to the smaller size.
        """
        best, at = -math.inf, n
        here = self.speedup(n)
        for m in range(n + 1, limit + 1):
            gain = (self.speedup(m) - here) / (m - n)
            if gain > best + 1e-12:
                best, at = gain, m
        return (best if at > n else 0.0), at


def _within_noise(points: Mapping[int, float], spread: float) -> dict[int, float]:
    """Measured sizes, a dip within the measurements' spread lifted to the size before it."""
    out: dict[int, float] = {}
    best = 0.0
    for n in sorted(points):
        x = points[n]
        if 0 < x < best and best - x <= spread * (best + x):
            x = best
        out[n] = x
        best = max(best, x)
    return out


def size_model(
    observed: Mapping[int, float],
    per_node: int,
    prior: ScalingPrior = ScalingPrior(),
    placed: Mapping[tuple[int, int], float] | None = None,
    spread: float = 0.0,
) -> SizeModel:
    """The :class:`SizeModel` of these values, shared by every round that sees the same ones.

    A model is a function of its inputs alone and is never changed after it is built (its
    speed-up cache only memoises), so rounds that see a job's same measurements reuse it:
    fitting dominated a round's time on clusters of many jobs. Bounded (least recently used).
    """
    return _size_model(
        tuple(observed.items()), per_node, prior, tuple((placed or {}).items()), spread
    )


@functools.lru_cache(maxsize=8192)
def _size_model(
    observed: tuple[tuple[int, float], ...],
    per_node: int,
    prior: ScalingPrior,
    placed: tuple[tuple[tuple[int, int], float], ...],
    spread: float,
) -> SizeModel:
    return SizeModel(dict(observed), per_node, prior, dict(placed), spread)
