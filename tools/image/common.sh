# Sourced by the tools/image scripts: one place for buildah's storage and the names they share.
# The storage lives in the project cache (vfs: plain directories, no overlay mount, no daemon), so
# a second `make image` and a fresh clone on the same machine reuse the base and the layers.
GROUPOPS_CACHE="${GROUPOPS_CACHE:-$HOME/.cache/groupops}"
CONTAINERS_DIR="${GROUPOPS_CONTAINERS:-$GROUPOPS_CACHE/containers}"
BUILDAH=(buildah --root "$CONTAINERS_DIR/storage" --runroot "$CONTAINERS_DIR/run" --storage-driver vfs)

say() { printf '== image: %s\n' "$*" >&2; }
