#!/bin/sh
# Builds the agentmesh container image (packaging/Containerfile) from this
# checkout: a static agentmesh binary (musl), the static /readyz probe, both laid
# out with the empty data dir in target/container, then the image itself.
#
#   packaging/container/build.sh                 # podman, image agentmesh:<version>
#   CONTAINER_ENGINE=docker packaging/container/build.sh
#   CONTAINER_ENGINE=none packaging/container/build.sh    # only the build context
#
# Needs the musl target and a musl C compiler, for the bundled SQLite and
# mimalloc: `rustup target add x86_64-unknown-linux-musl` and Debian's
# musl-tools (apt-get install musl-tools).
set -eu
cd "$(dirname "$0")/../.."

arch=$(uname -m)
target="$arch-unknown-linux-musl"
engine=${CONTAINER_ENGINE:-podman}
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
context=target/container

cargo build --release --locked -p agentmesh --target "$target"

rm -rf "$context"
mkdir -p "$context/rootfs/usr/local/bin" "$context/state/agentmesh"
chmod 0700 "$context/state/agentmesh"
cp "target/$target/release/agentmesh" "$context/rootfs/usr/local/bin/agentmesh"
rustc --edition 2021 -O --target "$target" -C strip=symbols \
    packaging/container/readyz.rs -o "$context/rootfs/usr/local/bin/readyz"

case "$engine" in
    none)
        echo "build context ready in $context (agentmesh $version)"
        ;;
    podman)
        # HEALTHCHECK is kept only in the docker image format.
        podman build --format docker -f packaging/Containerfile -t "agentmesh:$version" "$context"
        ;;
    *)
        "$engine" build -f packaging/Containerfile -t "agentmesh:$version" "$context"
        ;;
esac
