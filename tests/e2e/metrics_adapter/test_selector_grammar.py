"""Our label-selector parser against kube-apiserver's, selector by selector.

The HPA passes the user's `selector`/`metricLabelSelector` to the adapter as it wrote them, and
the user judges them by what `kubectl get pods -l ...` says. So every selector of a corpus (hand
-picked edge cases: `in`, `notin`, `!key`, empty values, long names, DNS prefixes, whitespace,
commas, `==`, `!=`, `>`/`<`, illegal characters; and a seeded generated mix of the same pieces)
is sent as `labelSelector` to the real apiserver's pod list and parsed by
`metrics_adapter.kube.selectors`: both must accept or refuse the same ones, and for those
accepted, select the same pods of a small labelled set.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from kubernetes import client

from metrics_adapter.errors import InvalidSelectorError
from metrics_adapter.kube.selectors import LabelSelector
from tests.e2e.harness.bodies import as_body

pytestmark = pytest.mark.timeout(600)

LONG = "a" * 63
TOO_LONG = "a" * 64

PODS: dict[str, dict[str, str]] = {
    "trainer-gpu": {"app": "trainer", "tier": "gpu", "example.com/team": "ml", "v": "2"},
    "trainer-cpu": {"app": "trainer", "tier": "cpu", "v": "10", "empty": ""},
    "serving": {"app": "serving", "example.com/team": "web", LONG: LONG},
    "dotted": {"app.kubernetes.io/name": "digits", "a-b_c.d": "x_y-z.1"},
    "bare": {},
}
"""The labelled pods every accepted selector is matched against."""

EDGE_CASES = [
    "",
    " ",
    "\t",
    "app",
    "!app",
    "! app",
    "!app=trainer",
    "!!app",
    "app=trainer",
    "app==trainer",
    "app!=trainer",
    "app = trainer",
    "app=",
    "app==",
    "app!=",
    "empty=",
    "=trainer",
    "app=trainer,",
    ",app=trainer",
    "app=trainer,,tier=gpu",
    "app=trainer , tier=gpu",
    "app=trainer,tier=gpu,v=2",
    "app in (trainer)",
    "app in (trainer,serving)",
    "app in ( trainer , serving )",
    "app in (trainer,)",
    "app in (,trainer)",
    "app in ()",
    "app in",
    "app in trainer",
    "app in (trainer",
    "app in (trainer))",
    "appin(trainer)",
    "app notin (trainer)",
    "app notin (serving,trainer),tier",
    "app notin ()",
    "tier in (gpu),tier notin (cpu)",
    "in in (in)",
    "notin=in",
    "app=in",
    "v>1",
    "v<10",
    "v>x",
    "v>",
    "v > 1",
    "v>-1",
    "v>+1",
    "v>1.5",
    "v>=1",
    "v<=1",
    "v=>1",
    "v>01",
    "v>9223372036854775807",
    "v>9223372036854775808",
    f"v>{'9' * 64}",
    "!in",
    "app=trainer\x00,tier=gpu",
    "app=\x00trainer",
    "app\x00=trainer",
    "app=\x00\x00trainer",
    "app= \x00trainer",
    "app==\x00trainer",
    "app in (\x00trainer)",
    "tra\x00iner",
    "\x00app=trainer",
    "example.com/team=ml",
    "example.com/team",
    "!example.com/team",
    "Example.com/team=ml",
    "example..com/team=ml",
    "-example.com/team=ml",
    "example.com/=ml",
    "/team=ml",
    "example.com/team/x=ml",
    "app.kubernetes.io/name=digits",
    "a-b_c.d=x_y-z.1",
    f"{LONG}={LONG}",
    f"{LONG}",
    f"{TOO_LONG}=x",
    f"app={TOO_LONG}",
    f"{'a' * 253}/{LONG}=x",
    f"{'a' * 254}/x=y",
    "app=-trainer",
    "app=trainer-",
    "app=_trainer",
    "app=tra iner",
    "app=trainer)",
    "app=(trainer)",
    "app=trainer!",
    "app=tr@iner",
    "app=trä",
    "äpp=trainer",
    "app=trainer;tier=gpu",
    "app:trainer",
    "app=trainer&tier=gpu",
    "app\t=\ttrainer",
    "app\n=trainer",
    "app=\x00",
    "app=='trainer'",
    'app="trainer"',
    "app===trainer",
    "app=!trainer",
    "app!trainer",
    "(app=trainer)",
    "app,",
    ",",
    ",,",
    "!",
    "=",
    "==",
    "!=",
    "in",
    "notin",
    "()",
    "app=trainer,!tier",
    "!tier,app",
    "x=1,x=2",
    "x in (1),x notin (1)",
]
"""Edge cases a user (or an attacker) can write; what each does is up to the apiserver."""

KEYS = ["app", "tier", "v", "empty", "example.com/team", LONG, TOO_LONG, "a/b/c", "UP", "-x", ""]
VALUES = ["trainer", "gpu", "", "2", "10", LONG, TOO_LONG, "-x", "x-", "a.b", "a b", "ü", "in"]
OPERATORS = ["=", "==", "!=", " in ", " notin ", ">", "<", "", "!", " = ", "=!", "<>"]
SETS = ["({v})", "({v},{w})", "({v},)", "()", "( {v} )", "{v}", "({v}"]


def generated(seed: int, count: int) -> list[str]:
    """A seeded mix of keys, operators, values and value sets, joined by commas."""
    rng = random.Random(seed)

    def requirement() -> str:
        key, op = rng.choice(KEYS), rng.choice(OPERATORS)
        v, w = rng.choice(VALUES), rng.choice(VALUES)
        if op == "!":
            return f"!{key}"
        if op.strip() in ("in", "notin"):
            return f"{key}{op}{rng.choice(SETS).format(v=v, w=w)}"
        return f"{key}{op}{v if op else ''}"

    return [
        rng.choice([",", ", ", " ,", ",,"]).join(requirement() for _ in range(rng.randint(1, 3)))
        for _ in range(count)
    ]


@dataclass(frozen=True)
class Verdict:
    """What one parser made of a selector: refused, or the pods it selects."""

    accepted: bool
    pods: frozenset[str] = frozenset()

    def __str__(self) -> str:
        return f"selects {sorted(self.pods)}" if self.accepted else "refused"


def apiserver_verdict(core: client.CoreV1Api, namespace: str, selector: str) -> Verdict:
    try:
        listed = core.list_namespaced_pod(namespace, label_selector=selector)
    except client.ApiException as e:
        if e.status != 400:
            raise
        return Verdict(False)
    return Verdict(True, frozenset(str(p.metadata.name) for p in listed.items))


def our_verdict(selector: str) -> Verdict:
    try:
        parsed = LabelSelector.parse(selector)
    except InvalidSelectorError:
        return Verdict(False)
    return Verdict(True, frozenset(name for name, labels in PODS.items() if parsed.matches(labels)))


@pytest.fixture(scope="module")
def labelled_pods(kube_api: client.ApiClient) -> Iterator[tuple[client.CoreV1Api, str]]:
    """A namespace with `PODS` (never run: only their labels matter)."""
    core = client.CoreV1Api(kube_api)
    namespace = f"selectors-{uuid.uuid4().hex[:6]}"
    core.create_namespace(as_body({"metadata": {"name": namespace}}))
    try:
        for name, labels in PODS.items():
            core.create_namespaced_pod(
                namespace,
                as_body(
                    {
                        "metadata": {"name": name, "labels": labels},
                        "spec": {"containers": [{"name": "c", "image": "none.invalid/x"}]},
                    }
                ),
            )
        yield core, namespace
    finally:
        core.delete_namespace(namespace, propagation_policy="Background")


@pytest.mark.parametrize(
    "corpus",
    [pytest.param(EDGE_CASES, id="edge-cases"), pytest.param(generated(25, 400), id="generated")],
)
def test_we_accept_refuse_and_select_as_kube_apiserver_does(
    labelled_pods: tuple[client.CoreV1Api, str], corpus: list[str]
) -> None:
    core, namespace = labelled_pods
    assert apiserver_verdict(core, namespace, "").pods == set(PODS)  # the pods are all there
    differences = []
    accepted = 0
    for selector in corpus:
        theirs, ours = apiserver_verdict(core, namespace, selector), our_verdict(selector)
        accepted += theirs.accepted
        if theirs != ours:
            differences.append(f"{selector!r}: kube-apiserver {theirs}, ours {ours}")
    print(f"\n{len(corpus)} selectors, {accepted} accepted by kube-apiserver")
    # The corpus tells accepted from refused ones (neither side of it is empty).
    assert 0 < accepted < len(corpus)
    assert differences == [], "\n".join(differences)
