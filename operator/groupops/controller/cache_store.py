"""What a watch cache holds, and the rule that keeps the operator's own writes visible: pure.

Stage: controller, no I/O, no clock, no lock. Used by `cache.WatchCache` (which serialises the
calls and passes the time); unit-tested on its own (tests/unit/controller/test_cache_store.py).

Read-your-writes and resourceVersions. The API promises that resourceVersions are opaque: two can
be compared for equality only, never for order. What it does promise is order in time: one watch
delivers an object's changes in the order they happened, and a LIST without a resourceVersion is
a consistent read, as new as every write that returned before it began. So a write the operator
notes (`note_written` with the server's answer, or `note_deleted`) shows at once and *holds* its
object:

1. A note whose resourceVersion the stream has already delivered for that object is late (the
   store holds that version or a newer one) and is ignored; likewise a deletion whose DELETED
   event already came. (The last `SEEN_HISTORY` versions delivered are remembered.) So is a
   note about a name the store shows nothing of, when the write leaves it outside the filter or
   deletes it: there is nothing to hide, and no event would ever release the hold.
2. While a hold on version R stands, stream events of that object carrying another version
   happened before R (the stream is ordered and has not reached R): they do not replace the
   held object. The event carrying R releases the hold, and so does the object's DELETED event
   (nothing of that uid comes after its deletion); a noted deletion, its DELETED event.
3. A relist that began after the note replaces the held object (it is at least as new); one that
   began before the note leaves it held.
4. A hold lasts at most `HOLD_LIMIT_S`: should the releasing event never come (a history too
   short for rule 1, say), the next event replaces it.

Worked example: a reconcile creates Lease L (answer "41", noted) and, in the same run, fences it
(answer "57", noted: the hold is now on "57"). The watch, a few milliseconds behind, delivers
ADDED "41": ignored, the store keeps "57", and the next reconcile fences nothing twice. Then "57":
the hold is released. Then "60" (the consumer's first renewal): stored.

Notes assume one writer per object at a time (the reconcile holds its policy's lock), so the
last note of an object is its newest write.
"""

from __future__ import annotations

import functools
import itertools
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "HOLD_LIMIT_S",
    "SEEN_HISTORY",
    "ChangeStamps",
    "Key",
    "Selector",
    "VersionedStore",
    "key_of",
    "rv_of",
]

Key = tuple[str, str]
"""(namespace, name); namespace "" for cluster-scoped objects."""

HOLD_LIMIT_S = 60.0
"""Longest a noted write shadows the stream (rule 4): far beyond a watch's delivery delay
(milliseconds), short enough that a lost release costs one minute of a stale view at worst."""

SEEN_HISTORY = 4096
"""(object, resourceVersion) pairs remembered per store for rule 1. A note is late by the time
between the server's answer and the note (microseconds), so a short history is plenty."""

_DELETED = "DELETED"


@dataclass(frozen=True, slots=True)
class Selector:
    """A label selector of the forms the API takes in `labelSelector`, without set operators:
    `k=v`, `k==v`, `k!=v`, `k` (present), `!k` (absent), joined by commas."""

    terms: tuple[tuple[str, str, str], ...]

    @classmethod
    @functools.lru_cache(maxsize=16384)  # every settled check parses its policy's selector again
    def parse(cls, text: str) -> Selector:
        terms: list[tuple[str, str, str]] = []
        for part in (p.strip() for p in text.split(",")):
            if not part:
                continue
            if "!=" in part:
                key, value = part.split("!=", 1)
                terms.append((key.strip(), "!=", value.strip()))
            elif "=" in part:
                key, value = part.replace("==", "=", 1).split("=", 1)
                terms.append((key.strip(), "=", value.strip()))
            elif part.startswith("!"):
                terms.append((part[1:].strip(), "absent", ""))
            elif " " in part or "(" in part:
                raise ValueError(f"label selector {text!r}: set operators are not supported ({part!r})")
            else:
                terms.append((part, "present", ""))
        return cls(tuple(terms))

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        for key, operator, value in self.terms:
            if operator == "=" and labels.get(key) != value:
                return False
            if operator == "!=" and labels.get(key) == value:
                return False
            if operator == "present" and key not in labels:
                return False
            if operator == "absent" and key in labels:
                return False
        return True


def key_of(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def rv_of(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _uid(obj: Mapping[str, Any]) -> str | None:
    uid = (obj.get("metadata") or {}).get("uid")
    return None if uid is None else str(uid)


@dataclass(frozen=True, slots=True)
class _Hold:
    """A noted write waiting for the stream to deliver it: version `rv` (None: a deletion) of
    the object `uid`; `seq` orders notes against relists; `at` is when it was noted."""

    rv: str | None
    uid: str | None
    seq: int
    at: float


INDEXED_LABEL = "groupops.dev/policy"
"""The label every reconcile selects its pods and Leases by: indexed, so a list costs what the
policy has, not what the cache holds (1,000 policies: 6,000 objects per kind scanned before)."""


class ChangeStamps:
    """One stamp per (namespace, `INDEXED_LABEL` value), moved by a change under that value in
    any of the stores that share it: what a settled policy's check compares for every kind it
    owns at once (docs/design.md §8.3, "one stamp per policy across the kinds it owns").

    A stamp is drawn from one sequence and never written twice, so stores on different watch
    threads need no common lock: whichever of two changes is stored last, the stamp differs from
    every stamp read before either."""

    def __init__(self) -> None:
        self._sequence = itertools.count(1)
        self._stamps: dict[tuple[str, str], int] = {}

    def moved(self, index: tuple[str, str]) -> None:
        self._stamps[index] = next(self._sequence)

    def of(self, namespace: str, value: str) -> int:
        """The stamp of the objects under `value` in `namespace` (0: none ever changed)."""
        return self._stamps.get((namespace, value), 0)


class IndexedObjects(dict[Key, dict[str, Any]]):
    """The store's objects, with an index by (namespace, `INDEXED_LABEL` value), and a count of
    the changes under each index value (`generations`), also told to `stamps` when given. Every
    mutation the store makes goes through `__setitem__`, `__delitem__` or `pop`."""

    def __init__(self, stamps: ChangeStamps | None = None) -> None:
        super().__init__()
        self._stamps = stamps
        self.by_label: dict[tuple[str, str], set[Key]] = {}
        self.generations: dict[tuple[str, str], int] = {}
        """Per (namespace, index value): how many times an object under it was added, replaced
        by another resourceVersion, moved away or removed. Never reset (a set that empties and
        fills again must not count from the start again), so equal counts mean the objects under
        that value are the same objects, version for version."""

    @staticmethod
    def _label(obj: Mapping[str, Any]) -> str | None:
        value = ((obj.get("metadata") or {}).get("labels") or {}).get(INDEXED_LABEL)
        return None if value is None else str(value)

    def _bump(self, namespace: str, label: str | None) -> None:
        if label is not None:
            index = (namespace, label)
            self.generations[index] = self.generations.get(index, 0) + 1
            if self._stamps is not None:
                self._stamps.moved(index)

    def _unindex(self, key: Key) -> str | None:
        old = super().get(key)
        label = None if old is None else self._label(old)
        if label is not None:
            keys = self.by_label.get((key[0], label))
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self.by_label[(key[0], label)]
        return label

    def __setitem__(self, key: Key, obj: dict[str, Any]) -> None:
        old = super().get(key)
        old_label = self._unindex(key)
        super().__setitem__(key, obj)
        label = self._label(obj)
        if label is not None:
            self.by_label.setdefault((key[0], label), set()).add(key)
        if old is None or label != old_label or rv_of(old) != rv_of(obj):
            self._bump(key[0], old_label)
            if label != old_label:
                self._bump(key[0], label)

    def __delitem__(self, key: Key) -> None:
        self._bump(key[0], self._unindex(key))
        super().__delitem__(key)

    def pop(self, key: Key, *default: Any) -> Any:
        self._bump(key[0], self._unindex(key))
        return super().pop(key, *default)

    def generation(self, namespace: str, selector: Selector) -> int | None:
        """The change count of the objects `selector` can match in `namespace`, when it requires
        an index value (None: it requires none, so no count covers it)."""
        value = self.indexed_value(selector)
        return None if value is None else self.generations.get((namespace, value), 0)

    @staticmethod
    def indexed_value(selector: Selector) -> str | None:
        """The value the selector requires of `INDEXED_LABEL` (None: it requires none)."""
        for key, operator, value in selector.terms:
            if key == INDEXED_LABEL and operator == "=":
                return value
        return None


class VersionedStore:
    """The objects of one cache under the rule of the module docstring; `now` in seconds."""

    def __init__(
        self,
        *,
        history: int = SEEN_HISTORY,
        hold_limit: float = HOLD_LIMIT_S,
        stamps: ChangeStamps | None = None,
    ) -> None:
        self.objects = IndexedObjects(stamps)
        self._holds: dict[Key, _Hold] = {}
        self._seen: OrderedDict[tuple[Key, str], None] = OrderedDict()
        self._history = history
        self._hold_limit = hold_limit
        self._seq = 0

    @property
    def seq(self) -> int:
        """Notes made so far: a relist records it when it begins (rule 3)."""
        return self._seq

    def held(self, key: Key) -> bool:
        return key in self._holds

    def event(self, event_type: str, obj: dict[str, Any], *, now: float) -> bool:
        """Apply one watch event (ADDED, MODIFIED, DELETED; `obj` is kept, not copied). Returns
        False when a hold kept it out (rule 2)."""
        key, rv, uid = key_of(obj), rv_of(obj), _uid(obj)
        self._saw(key, rv)
        if event_type == _DELETED:
            self._saw(key, f"deleted:{uid}")
        hold = self._holds.get(key)
        if hold is not None:
            released = (
                (hold.rv is not None and rv == hold.rv)
                or (event_type == _DELETED and (hold.uid is None or uid == hold.uid))
                or now - hold.at > self._hold_limit
            )
            if not released:
                return False
            del self._holds[key]
        if event_type == _DELETED:
            self.objects.pop(key, None)
        else:
            self.objects[key] = obj
        return True

    def note_written(self, obj: dict[str, Any], *, now: float, selected: bool = True) -> bool:
        """A write's answer (kept, not copied). `selected`: the object passes the cache's filter
        (one that no longer does is gone from the cache, as the watch will say with DELETED).
        Returns False when the note was late (rule 1) or concerns nothing the cache shows (an
        object outside its filter that it never held: the watch will never tell of it)."""
        key, rv = key_of(obj), rv_of(obj)
        if (key, rv) in self._seen:
            return False
        if not selected and key not in self.objects and key not in self._holds:
            return False
        self._seq += 1
        if selected:
            self.objects[key] = obj
        else:
            self.objects.pop(key, None)
        self._holds[key] = _Hold(rv=rv, uid=_uid(obj), seq=self._seq, at=now)
        return True

    def note_deleted(self, key: Key, uid: str | None, *, now: float) -> bool:
        """A deletion the operator made (`uid` of the deleted object, when known). Returns False
        when the stream already told it (rule 1) or the cache shows nothing of that name (there
        is nothing to hide, and a hold could wait for a DELETED event that never comes)."""
        if uid is not None and (key, f"deleted:{uid}") in self._seen:
            return False
        current = self.objects.get(key)
        if current is None and key not in self._holds:
            return False
        if current is not None and uid is not None and _uid(current) != uid:
            return False  # the cache already holds a newer object of that name
        self._seq += 1
        self.objects.pop(key, None)
        self._holds[key] = _Hold(rv=None, uid=uid, seq=self._seq, at=now)
        return True

    def relist(
        self, namespace: str | None, items: Iterable[dict[str, Any]], *, began: int
    ) -> list[tuple[str, dict[str, Any]]]:
        """Replace the objects of `namespace` (None: all) by a LIST's `items` (kept, not copied),
        which began when `seq` was `began`; returns the differences as events (rule 3)."""
        fresh = {key_of(item): item for item in items}
        for key, item in fresh.items():
            self._saw(key, rv_of(item))
        scope = {key for key in self.objects if namespace is None or key[0] == namespace}
        events: list[tuple[str, dict[str, Any]]] = []
        for key in sorted(scope | fresh.keys()):
            hold = self._holds.get(key)
            if hold is not None:
                if hold.seq > began:
                    continue  # noted while the LIST ran: the note may be newer than the list
                del self._holds[key]
            old, new = self.objects.get(key), fresh.get(key)
            if new is None:
                if old is not None:
                    del self.objects[key]
                    events.append((_DELETED, old))
                continue
            self.objects[key] = new
            if old is None:
                events.append(("ADDED", new))
            elif rv_of(old) != rv_of(new):
                events.append(("MODIFIED", new))
        return events

    def _saw(self, key: Key, version: str) -> None:
        self._seen[(key, version)] = None
        self._seen.move_to_end((key, version))
        while len(self._seen) > self._history:
            self._seen.popitem(last=False)
