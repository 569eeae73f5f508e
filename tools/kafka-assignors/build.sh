#!/usr/bin/env bash
# Build the Kafka assignor harness (kafka-assignors.jar + lib/) once per version of its sources and
# print the directory that holds it: $GROUPOPS_CACHE/kafka-assignors-<hash of pom.xml and src/>.
# Called by make (mk/kafka-assignors.mk) and by tests/differential/kafka_harness.py; a cached build
# costs one hash. Maven builds in a temporary copy, so the source tree gets no target/.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${GROUPOPS_CACHE:-$HOME/.cache/groupops}
hash=$(cd "$here" && find pom.xml src -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
out=$cache/kafka-assignors-$hash
if [ ! -f "$out/kafka-assignors.jar" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  cp -r "$here/pom.xml" "$here/src" "$work/"
  mvn -q -B -Dstyle.color=never -f "$work/pom.xml" -Dmaven.repo.local="$cache/m2" package >&2
  mkdir -p "$work/out"
  cp "$work/target/kafka-assignors.jar" "$work/out/"
  cp -r "$work/target/lib" "$work/out/lib"
  mkdir -p "$cache"
  # Rename into place: a concurrent or interrupted build never leaves a half directory behind.
  mv -T "$work/out" "$out" 2>/dev/null || test -f "$out/kafka-assignors.jar"
fi
echo "$out"
