#!/usr/bin/env bash
# Build the bare Debian 12 node image used by the demo, molecule and the cluster tests:
#   debootstrap (minbase + openssh-server + python3) -> docker import -> docker build (node/).
# Cached by tag: the tag carries a hash of this script and node/, so an unchanged image is reused.
# With HVD_NODE_PACKAGES (a space-separated list of distro packages) it also builds <image>-<HVD_NODE_VARIANT>
# (default: packages): the node plus those packages, not held (a site's golden image; tests/lab.py passes the roles'
# own list, or a kernel image and its headers), cached the same way.
# The Debian mirror comes from this machine's own apt sources (or HVD_DEBIAN_MIRROR); none is written here.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
suite=${HVD_NODE_SUITE:-bookworm}
hash=$(cat "$0" "$here"/node/* | sha256sum | cut -c1-12)
image=${HVD_NODE_IMAGE:-hvdcluster/node:debian12}
base=hvdcluster/debian12-rootfs:$hash

# Parallel test workers each ask for the image: one builds it, the others wait here and then find it up to date.
# The lock lies in this user's own cache folder, not in a folder every local user may write to (where another user
# could plant a symlink for it in advance).
locks=${XDG_CACHE_HOME:-$HOME/.cache}/hvdcluster
mkdir -p -m 0700 "$locks"
exec 9>>"$locks/node-image.lock"
flock 9

label() { docker image inspect -f '{{ index .Config.Labels "hvdcluster.hash" }}' "$1" 2>/dev/null || true; }

build_node() {
    mirror=${HVD_DEBIAN_MIRROR:-}
    if [ -z "$mirror" ]; then
        mirror=$( { sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null || true
                    sed -n 's/^deb \(\[[^]]*\] \)\{0,1\}\([^ ]*\) .*/\2/p' /etc/apt/sources.list 2>/dev/null || true
                  } | grep -v -e security -e '^$' | head -n 1 || true)
    fi
    [ -n "$mirror" ] || { echo "build.sh: no Debian mirror found in /etc/apt; set HVD_DEBIAN_MIRROR" >&2; exit 2; }

    if ! docker image inspect "$base" >/dev/null 2>&1; then
        work=$(mktemp -d /var/tmp/hvd-rootfs.XXXXXX)
        trap 'rm -rf "$work"' EXIT
        echo "debootstrap $suite from $mirror ..."
        debootstrap --variant=minbase --include=openssh-server,python3 "$suite" "$work/rootfs" "$mirror" \
            > "$work/debootstrap.log" 2>&1 || { tail -n 30 "$work/debootstrap.log" >&2; exit 1; }
        # The node keeps this machine's own apt sources when they are Debian's for the same suite
        # (security and updates included); otherwise debootstrap's sources.list stays.
        if grep -qs "^Suites:.*\b$suite\b" /etc/apt/sources.list.d/debian.sources; then
            cp /etc/apt/sources.list.d/debian.sources "$work/rootfs/etc/apt/sources.list.d/debian.sources"
            : > "$work/rootfs/etc/apt/sources.list"
        fi
        tar -C "$work/rootfs" -c . | docker import - "$base" >/dev/null
    fi
    DOCKER_BUILDKIT=0 docker build -q --build-arg "BASE=$base" --label "hvdcluster.hash=$hash" -t "$image" "$here/node" >/dev/null
    echo "built node image $image ($hash)"
}

if [ "$(label "$image")" = "$hash" ]; then
    echo "node image $image is up to date ($hash)"
else
    build_node
fi

packages=${HVD_NODE_PACKAGES:-}
[ -n "$packages" ] || exit 0
packaged=$image-${HVD_NODE_VARIANT:-packages}
phash=$(printf '%s\n%s\n' "$hash" "$packages" | sha256sum | cut -c1-12)
if [ "$(label "$packaged")" = "$phash" ]; then
    echo "node image $packaged is up to date ($phash)"
    exit 0
fi
printf 'FROM %s\nRUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends %s >/dev/null && apt-get clean && rm -rf /var/lib/apt/lists/*\n' \
    "$image" "$packages" | DOCKER_BUILDKIT=0 docker build -q --label "hvdcluster.hash=$phash" -t "$packaged" - >/dev/null
echo "built node image $packaged ($phash)"
