"""The watch caches' store: the resourceVersion rule (a noted write is visible at once and no
older watch event brings an older version back), relist differences, and label selectors."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groupops.controller.cache_store import (
    HOLD_LIMIT_S,
    INDEXED_LABEL,
    ChangeStamps,
    IndexedObjects,
    Selector,
    VersionedStore,
)

NS = "ns"


def lease(rv: str, *, name: str = "l", uid: str = "u1", holder: str = "") -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": NS, "resourceVersion": rv, "uid": uid},
        "spec": {"holderIdentity": holder},
    }


def held_rv(store: VersionedStore, name: str = "l") -> str | None:
    obj = store.objects.get((NS, name))
    return None if obj is None else str(obj["metadata"]["resourceVersion"])


def test_a_noted_write_is_visible_at_once_and_older_events_do_not_replace_it() -> None:
    store = VersionedStore()
    store.event("ADDED", lease("41"), now=0)
    assert store.note_written(lease("57", holder="fenced"), now=1)
    assert held_rv(store) == "57"

    assert not store.event("MODIFIED", lease("44"), now=1.1), "an event from before the write"
    assert held_rv(store) == "57"

    assert store.event("MODIFIED", lease("57", holder="fenced"), now=1.2), "the write itself"
    assert not store.held((NS, "l"))
    assert store.event("MODIFIED", lease("60"), now=1.3), "after the write: newer"
    assert held_rv(store) == "60"


def test_a_note_that_comes_after_the_watch_delivered_its_version_is_ignored() -> None:
    store = VersionedStore()
    store.event("MODIFIED", lease("57"), now=0)
    store.event("MODIFIED", lease("60"), now=0)
    assert not store.note_written(lease("57"), now=1)
    assert held_rv(store) == "60"
    assert not store.held((NS, "l"))


def test_a_write_that_changed_nothing_holds_nothing() -> None:
    store = VersionedStore()
    store.event("ADDED", lease("41"), now=0)
    assert not store.note_written(lease("41"), now=1), "same resourceVersion: no event will come"
    assert store.event("MODIFIED", lease("42"), now=2)
    assert held_rv(store) == "42"


def test_successive_notes_hold_until_the_last_one_arrives() -> None:
    store = VersionedStore()
    store.note_written(lease("10"), now=0)
    store.note_written(lease("11"), now=0)
    assert not store.event("ADDED", lease("10"), now=0.1)
    assert held_rv(store) == "11"
    assert store.event("MODIFIED", lease("11"), now=0.2)
    assert not store.held((NS, "l"))


def test_a_noted_deletion_hides_the_object_until_its_deleted_event() -> None:
    store = VersionedStore()
    store.event("ADDED", lease("41"), now=0)
    assert store.note_deleted((NS, "l"), "u1", now=1)
    assert held_rv(store) is None
    assert not store.event("MODIFIED", lease("44"), now=1.1), "a renewal from before the delete"
    assert held_rv(store) is None
    assert store.event("DELETED", lease("45"), now=1.2)
    assert store.event("ADDED", lease("50", uid="u2"), now=1.3), "created again by its consumer"
    assert held_rv(store) == "50"


def test_a_deletion_noted_after_its_deleted_event_leaves_a_new_object_alone() -> None:
    store = VersionedStore()
    store.event("ADDED", lease("41"), now=0)
    store.event("DELETED", lease("45"), now=0)
    store.event("ADDED", lease("50", uid="u2"), now=0)
    assert not store.note_deleted((NS, "l"), "u1", now=1)
    assert held_rv(store) == "50"


def test_the_deleted_event_of_a_held_object_releases_the_hold() -> None:
    store = VersionedStore()
    store.note_written(lease("57"), now=0)
    assert store.event("DELETED", lease("58"), now=0.1), "nothing of that uid comes after it"
    assert held_rv(store) is None
    assert not store.held((NS, "l"))


def test_a_deleted_event_of_an_older_object_of_the_same_name_does_not_release_the_hold() -> None:
    store = VersionedStore()
    store.note_written(lease("57", uid="new"), now=0)
    assert not store.event("DELETED", lease("50", uid="old"), now=0.1)
    assert held_rv(store) == "57"


def test_a_hold_gives_way_to_the_stream_after_its_limit() -> None:
    store = VersionedStore()
    store.note_written(lease("57"), now=0)
    assert not store.event("MODIFIED", lease("44"), now=HOLD_LIMIT_S - 1)
    assert store.event("MODIFIED", lease("70"), now=HOLD_LIMIT_S + 1)
    assert held_rv(store) == "70"


def test_a_write_that_leaves_the_filter_is_gone_from_the_store() -> None:
    store = VersionedStore()
    store.event("ADDED", lease("41"), now=0)
    store.note_written(lease("57"), now=1, selected=False)
    assert held_rv(store) is None
    assert not store.event("MODIFIED", lease("44"), now=1.1)
    assert held_rv(store) is None


def test_writes_and_deletions_of_objects_the_cache_never_showed_hold_nothing() -> None:
    store = VersionedStore()
    assert not store.note_written(lease("7", name="leader"), now=0, selected=False), "outside the filter"
    assert not store.note_deleted((NS, "unknown"), "u9", now=0)
    assert store.event("ADDED", lease("8", name="unknown", uid="u10"), now=1), "a later object of that name"
    assert held_rv(store, "unknown") == "8"


def test_a_relist_reports_what_changed_while_the_watch_was_away() -> None:
    store = VersionedStore()
    for obj in (lease("1", name="kept"), lease("2", name="changed"), lease("3", name="gone")):
        store.event("ADDED", obj, now=0)
    events = store.relist(
        NS, [lease("1", name="kept"), lease("9", name="changed"), lease("8", name="new")], began=store.seq
    )
    assert [(kind, obj["metadata"]["name"]) for kind, obj in events] == [
        ("MODIFIED", "changed"),
        ("DELETED", "gone"),
        ("ADDED", "new"),
    ]
    assert sorted(name for _, name in store.objects) == ["changed", "kept", "new"]


def test_a_relist_leaves_other_namespaces_alone() -> None:
    store = VersionedStore()
    other = lease("5", name="x")
    other["metadata"]["namespace"] = "other"
    store.event("ADDED", other, now=0)
    assert store.relist(NS, [], began=store.seq) == []
    assert ("other", "x") in store.objects


@pytest.mark.parametrize(
    ("noted_during_the_list", "expected_rv"),
    [
        pytest.param(False, "55", id="noted before the list began: the list is newer"),
        pytest.param(True, "57", id="noted while the list ran: the note stays"),
    ],
)
def test_a_relist_replaces_a_hold_only_when_it_began_after_the_note(
    noted_during_the_list: bool, expected_rv: str
) -> None:
    store = VersionedStore()
    if not noted_during_the_list:
        store.note_written(lease("57"), now=0)
    began = store.seq
    if noted_during_the_list:
        store.note_written(lease("57"), now=0)
    store.relist(NS, [lease("55")], began=began)
    assert held_rv(store) == expected_rv


def test_the_history_of_delivered_versions_is_bounded() -> None:
    store = VersionedStore(history=2)
    for rv in ("1", "2", "3"):
        store.event("MODIFIED", lease(rv), now=0)
    assert store.note_written(lease("1"), now=0), "forgotten: noted (the hold limit bounds the cost)"


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        pytest.param("a=1", {"a": "1"}, True, id="equal"),
        pytest.param("a==1", {"a": "1"}, True, id="double equal"),
        pytest.param("a=1", {"a": "2"}, False, id="other value"),
        pytest.param("a!=1", {}, True, id="not equal, absent"),
        pytest.param("a!=1", {"a": "1"}, False, id="not equal, equal"),
        pytest.param("a", {"a": ""}, True, id="present"),
        pytest.param("a", {"b": "1"}, False, id="present, missing"),
        pytest.param("!a", {"b": "1"}, True, id="absent"),
        pytest.param("a=1,b", {"a": "1"}, False, id="every term"),
        pytest.param("", None, True, id="empty selects everything"),
    ],
)
def test_label_selectors_match_as_the_api_server_does(
    selector: str, labels: dict[str, str] | None, matches: bool
) -> None:
    assert Selector.parse(selector).matches(labels) is matches


def test_set_based_selectors_are_refused_with_the_selector_named() -> None:
    with pytest.raises(ValueError, match="env in"):
        Selector.parse("env in (a,b)")


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["put", "del", "pop"]),
            st.sampled_from(["ns-a", "ns-b"]),
            st.sampled_from(["o1", "o2", "o3", "o4"]),
            st.sampled_from([None, "orders", "refunds"]),
        ),
        max_size=40,
    )
)
def test_the_policy_label_index_always_agrees_with_a_full_scan(
    steps: list[tuple[str, str, str, str | None]],
) -> None:
    objects = IndexedObjects()
    for action, namespace, name, policy in steps:
        key = (namespace, name)
        if action == "put":
            labels = {} if policy is None else {INDEXED_LABEL: policy}
            objects[key] = {"metadata": {"namespace": namespace, "name": name, "labels": labels}}
        elif action == "del" and key in objects:
            del objects[key]
        else:
            objects.pop(key, None)
    for namespace in ("ns-a", "ns-b"):
        for policy in ("orders", "refunds"):
            scanned = {
                key
                for key, obj in objects.items()
                if key[0] == namespace and obj["metadata"]["labels"].get(INDEXED_LABEL) == policy
            }
            assert objects.by_label.get((namespace, policy), set()) == scanned


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["put", "del", "pop"]),
            st.sampled_from(["ns-a", "ns-b"]),
            st.sampled_from(["o1", "o2", "o3"]),
            st.sampled_from([None, "orders", "refunds"]),
            st.sampled_from(["1", "2", "3"]),
        ),
        max_size=40,
    )
)
def test_an_equal_change_count_means_the_same_objects_version_for_version(
    steps: list[tuple[str, str, str, str | None, str]],
) -> None:
    """What a settled policy's check compares (`WatchCache.versions`): whenever the change count
    of an index value is what it was at an earlier step, the objects under it are the ones of
    that step, resourceVersion for resourceVersion, even across a set that emptied and refilled.
    A put of the version already held (a relist, the watch's echo of a noted write) is no
    change."""
    objects = IndexedObjects()
    seen: dict[tuple[str, str], dict[int, frozenset[tuple[str, str]]]] = {}

    def record() -> None:
        for namespace in ("ns-a", "ns-b"):
            for policy in ("orders", "refunds"):
                under = frozenset(
                    (key[1], str(obj["metadata"]["resourceVersion"]))
                    for key, obj in objects.items()
                    if key[0] == namespace and obj["metadata"]["labels"].get(INDEXED_LABEL) == policy
                )
                count = objects.generation(namespace, Selector.parse(f"{INDEXED_LABEL}={policy}"))
                assert count is not None
                assert seen.setdefault((namespace, policy), {}).setdefault(count, under) == under

    record()
    for action, namespace, name, policy, rv in steps:
        key = (namespace, name)
        if action == "put":
            labels = {} if policy is None else {INDEXED_LABEL: policy}
            objects[key] = {
                "metadata": {"namespace": namespace, "name": name, "labels": labels, "resourceVersion": rv}
            }
        elif action == "del" and key in objects:
            del objects[key]
        else:
            objects.pop(key, None)
        record()
    assert objects.generation("ns-a", Selector.parse("app=x")) is None, "no index value: no count"


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["Pod", "Lease"]),
            st.sampled_from(["put", "del"]),
            st.sampled_from(["o1", "o2"]),
            st.sampled_from([None, "orders", "refunds"]),
            st.sampled_from(["1", "2"]),
        ),
        max_size=40,
    )
)
def test_an_equal_shared_stamp_means_the_same_objects_in_every_store(
    steps: list[tuple[str, str, str, str | None, str]],
) -> None:
    """`ChangeStamps` shared by the stores of two kinds: whenever a policy's stamp is what it was
    at an earlier step, the objects under it in both stores are that step's, version for
    version, and any change in either store moves it."""
    stamps = ChangeStamps()
    stores = {"Pod": IndexedObjects(stamps), "Lease": IndexedObjects(stamps)}
    seen: dict[str, dict[int, frozenset[tuple[str, str, str]]]] = {}

    def under(policy: str) -> frozenset[tuple[str, str, str]]:
        return frozenset(
            (kind, key[1], str(obj["metadata"]["resourceVersion"]))
            for kind, objects in stores.items()
            for key, obj in objects.items()
            if obj["metadata"]["labels"].get(INDEXED_LABEL) == policy
        )

    def record() -> dict[str, frozenset[tuple[str, str, str]]]:
        now = {}
        for policy in ("orders", "refunds"):
            now[policy] = under(policy)
            assert seen.setdefault(policy, {}).setdefault(stamps.of(NS, policy), now[policy]) == now[policy]
        return now

    before = record()
    for kind, action, name, policy, rv in steps:
        stamps_before = {policy: stamps.of(NS, policy) for policy in ("orders", "refunds")}
        key = (NS, name)
        if action == "put":
            labels = {} if policy is None else {INDEXED_LABEL: policy}
            stores[kind][key] = {"metadata": {"name": name, "labels": labels, "resourceVersion": rv}}
        else:
            stores[kind].pop(key, None)
        after = record()
        for watched in ("orders", "refunds"):
            if after[watched] != before[watched]:
                assert stamps.of(NS, watched) != stamps_before[watched], f"{watched} changed unseen"
        before = after


def test_a_put_of_the_version_held_is_no_change_and_a_new_version_is() -> None:
    objects = IndexedObjects()
    selector = Selector.parse(f"{INDEXED_LABEL}=orders")
    pod = {"metadata": {"name": "p", "labels": {INDEXED_LABEL: "orders"}, "resourceVersion": "7"}}
    objects[(NS, "p")] = pod
    first = objects.generation(NS, selector)
    objects[(NS, "p")] = dict(pod)  # the watch's echo of a write the cache noted
    assert objects.generation(NS, selector) == first
    objects[(NS, "p")] = {**pod, "metadata": {**pod["metadata"], "resourceVersion": "8"}}
    assert objects.generation(NS, selector) == (first or 0) + 1
