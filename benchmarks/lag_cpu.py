"""CPU time of `lag` and `balanced` at 1,000,000 partitions x 1,000 members (best of 2).

python benchmarks/lag_cpu.py
"""

from __future__ import annotations

import time

import numpy as np

from groupops.assign import get_strategy
from groupops.model import GroupInput, Member, MemberId


def main() -> None:
    rng = np.random.default_rng(1)
    for topic_count in (1, 1000):
        per_topic = 1_000_000 // topic_count
        names = [f"t{i}" for i in range(topic_count)]
        group = GroupInput(
            topics=dict.fromkeys(names, per_topic),
            members=tuple(
                Member(member_id=MemberId(f"m{j:04d}"), topics=frozenset(names)) for j in range(1000)
            ),
            lags={name: rng.lognormal(6, 1.5, per_topic).astype(np.int64) for name in names},
        )
        for strategy in ("lag", "balanced"):
            best = float("inf")
            for _ in range(2):
                started = time.process_time()
                get_strategy(strategy)(group)
                best = min(best, time.process_time() - started)
            print(f"{topic_count} topics  {strategy:9s} {best:.3f} s CPU")


if __name__ == "__main__":
    main()
