#!/bin/bash
# scratch-in-memory.sh COMMAND [ARG...]: runs COMMAND with $TMPDIR on a tmpfs
# of its own, mounted in a private mount namespace, so that it is seen by
# COMMAND and its children only and goes when they end, whatever way they end.
# `make unit` runs its go commands through it: the unit tests make and delete
# many small trees, which cost more on a disk filesystem than in memory (about
# 11 CPU-s of the tier cold on this machine's ext4, which has no journal and so
# checks each new inode against those deleted in the last 30 s).
#
# COMMAND runs as it is, with $TMPDIR unchanged, where $TMPDIR is a tmpfs
# already (Debian 13's /tmp), where this is not root, or where no mount
# namespace can be made (a container without CAP_SYS_ADMIN): it says which.
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: scripts/scratch-in-memory.sh COMMAND [ARG...]" >&2; exit 2; }
tmp=${TMPDIR:-/tmp}
why=
if [ "$(stat -f -c %T "$tmp" 2>/dev/null)" = tmpfs ]; then
    why=
elif [ "$(id -u)" != 0 ]; then
    why="not root"
elif ! unshare --mount --propagation private true 2>/dev/null; then
    why="no mount namespace can be made here"
else
    dir=$(mktemp -d "$tmp/kpreload-scratch.XXXXXX")
    trap 'rmdir "$dir" 2>/dev/null || true' EXIT
    # The mount lives in the new namespace only; rmdir above removes the empty
    # mount point the host sees.
    rc=0
    unshare --mount --propagation private -- sh -c \
        'dir=$1; shift; mount -t tmpfs -o mode=1777 kpreload-scratch "$dir" && TMPDIR=$dir exec "$@"' \
        sh "$dir" "$@" || rc=$?
    exit $rc
fi
[ -z "$why" ] || echo "scratch-in-memory: temporary files stay in $tmp ($why)" >&2
exec "$@"
