"""The read caches (kept answers, kept per-pod items) never serve what a fresh read would not.

Each test reads through the real app, changes one thing a cached answer rests on (a scrape,
the catalogue, the pod set, a pod's labels, the selector, the clock) and checks the next
answer is what the changed state gives.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from metrics_adapter.providers.scraped_pods import AnswerCache
from metrics_adapter.scraping.catalogue import MetricCatalogue
from metrics_adapter.scraping.pod_registry import PodKey
from tests.unit.metrics_adapter.helpers import Harness, agent_samples, standard, trainer

CM = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml"
PODS = f"{CM}/pods/*/samples_per_second?labelSelector=app%3Dtrainer"
ONE = f"{CM}/pods/trainer-0/samples_per_second"
DEPLOY = f"{CM}/deployments.apps/trainer/samples_per_second"
EXTERNAL = "/apis/external.metrics.k8s.io/v1beta1/namespaces/ml/job_samples_per_second"


def get(h: Harness, path: str, code: int = 200) -> Any:
    resp = h.app.test_client().get(path)
    assert resp.status_code == code, resp.get_data()
    return json.loads(resp.get_data())


def values(h: Harness, path: str = PODS) -> dict[str, str]:
    return {i["describedObject"]["name"]: i["value"] for i in get(h, path)["items"]}


def test_a_scrape_shows_in_every_kind_of_answer() -> None:
    h = standard()
    assert values(h) == {"trainer-0": "100", "trainer-1": "50"}
    assert values(h, DEPLOY) == {"trainer": "150"}
    assert get(h, f"{EXTERNAL}?labelSelector=app%3Dtrainer")["items"][0]["value"] == "150"
    assert values(h) == {"trainer-0": "100", "trainer-1": "50"}  # kept, unchanged
    h.clock.t += 10
    h.feed(trainer("trainer-0"), agent_samples(7000, 200))  # (7000 - 1000) / 20 s
    assert values(h) == {"trainer-0": "300", "trainer-1": "50"}
    assert values(h, ONE) == {"trainer-0": "300"}
    assert values(h, DEPLOY) == {"trainer": "350"}
    assert get(h, f"{EXTERNAL}?labelSelector=app%3Dtrainer")["items"][0]["value"] == "350"


def test_a_value_that_goes_stale_leaves_the_kept_answer() -> None:
    h = standard()
    assert values(h) == {"trainer-0": "100", "trainer-1": "50"}
    assert values(h, DEPLOY) == {"trainer": "150"}
    h.clock.t += 25
    h.feed(trainer("trainer-1"), agent_samples(2250, 90))  # trainer-1 fresh, trainer-0 ages
    assert values(h) == {"trainer-0": "100", "trainer-1": "50"}
    h.clock.t += 6  # trainer-0's newest sample is now 31 s old (stale after 30 s)
    assert values(h) == {"trainer-1": "50"}
    assert values(h, DEPLOY) == {"trainer": "50"}
    assert get(h, ONE, 404)["reason"] == "NotFound"


def test_a_catalogue_reload_changes_kept_answers() -> None:
    h = standard()
    assert values(h, DEPLOY) == {"trainer": "150"}
    assert values(h) == {"trainer-0": "100", "trainer-1": "50"}
    current = h.catalogue.current
    mean = dataclasses.replace(
        current.custom["samples_per_second"],
        aggregation=current.custom["steps_per_second"].aggregation,
    )
    h.catalogue.replace(
        MetricCatalogue(
            custom={**current.custom, "samples_per_second": mean},
            external=current.external,
            generation=current.generation + 1,
        )
    )
    assert values(h, DEPLOY) == {"trainer": "75"}  # mean instead of sum
    renamed = {k: v for k, v in current.custom.items() if k != "samples_per_second"}
    h.catalogue.replace(MetricCatalogue(custom=renamed, external=current.external, generation=9))
    assert get(h, PODS, 404)["reason"] == "NotFound"


def test_a_deleted_pod_leaves_kept_answers() -> None:
    h = standard()
    assert values(h) == {"trainer-0": "100", "trainer-1": "50"}
    assert values(h, DEPLOY) == {"trainer": "150"}
    h.pods.remove(PodKey("ml", "trainer-0"))
    h.store.drop(PodKey("ml", "trainer-0"))
    assert values(h) == {"trainer-1": "50"}
    assert values(h, DEPLOY) == {"trainer": "50"}
    assert get(h, ONE, 404)["reason"] == "NotFound"


def test_relabelled_pods_and_other_selectors_get_their_own_answers() -> None:
    h = standard()
    assert values(h) == {"trainer-0": "100", "trainer-1": "50"}
    slow = f"{CM}/pods/*/samples_per_second?labelSelector=tier%3Dslow"
    assert values(h, slow) == {}
    h.pods.upsert(trainer("trainer-1", tier="slow"))  # same pod, new labels
    assert values(h, slow) == {"trainer-1": "50"}
    assert values(h) == {"trainer-0": "100", "trainer-1": "50"}
    gpu0 = f"{CM}/pods/*/gpu_utilization?labelSelector=app%3Dtrainer&metricLabelSelector=gpu%3D0"
    assert values(h, gpu0) == {"trainer-0": "800m", "trainer-1": "400m"}
    gpu1 = gpu0.replace("gpu%3D0", "gpu%3D1")
    assert values(h, gpu1) == {"trainer-0": "600m", "trainer-1": "200m"}


def test_a_recreated_pod_is_described_with_its_new_uid() -> None:
    h = standard()
    get(h, PODS)
    h.pods.upsert(dataclasses.replace(trainer("trainer-0"), uid="uid-2"))
    items = {i["describedObject"]["name"]: i["describedObject"] for i in get(h, PODS)["items"]}
    assert items["trainer-0"]["uid"] == "uid-2"


def test_answer_cache_holds_only_while_stamp_and_time_hold() -> None:
    cache: AnswerCache[str] = AnswerCache(max_bytes=1 << 20)
    cache.put("a", (1, 1), 100.0, "A", 100)
    assert cache.get("a", (1, 1), 99.0) == "A"
    assert cache.get("a", (1, 1), 100.0) is None  # its oldest value went stale
    cache.put("a", (1, 1), 100.0, "A", 100)
    assert cache.get("a", (1, 2), 99.0) is None  # the state moved
    assert len(cache) == 0 and cache.bytes == 0  # an answer that no longer holds is dropped
