#!/usr/bin/env bash
# Re-resolve the digests the base image's CUDA bases are pinned by (base-image/Dockerfile's ARG
# CUDA_*_IMAGE=REPOSITORY:TAG@sha256:DIGEST lines): the bump procedure of docs/images.md, "Bumping the bases".
#
#   scripts/pin-base-images.sh            rewrite each digest to what its tag points at now
#   scripts/pin-base-images.sh --check    only say which digests moved (exit 1 when one did)
#
# To move to another CUDA, edit the tags on those lines first (and TensorFlow with them), then run this.
# Needs crane (go-containerregistry) or docker with buildx, and the registry; both print the digest of the
# tag's index (every platform's), which is what a pull by digest resolves.
set -euo pipefail
cd "$(dirname "$0")/.."
dockerfile=${DOCKERFILE:-base-image/Dockerfile}
check=false
[ "${1:-}" = --check ] && check=true

digest_of() {  # REPOSITORY:TAG -> sha256:...
    if command -v crane >/dev/null; then
        crane digest "$1"
    elif docker buildx version >/dev/null 2>&1; then
        docker buildx imagetools inspect "$1" | awk '$1 == "Digest:" {print $2; exit}'
    else
        echo "pin-base-images: neither crane nor docker buildx is installed" >&2
        return 2
    fi
}

moved=0
while IFS= read -r line; do
    name=${line%%=*}
    ref=${line#*=}
    image=${ref%@*}
    pinned=${ref#*@}
    current=$(digest_of "$image")
    case "$current" in
        sha256:????????????????????????????????????????????????????????????????) ;;
        *) echo "pin-base-images: $image: no digest from the registry ($current)" >&2; exit 2 ;;
    esac
    if [ "$current" = "$pinned" ]; then
        echo "$name: $image is still $pinned"
        continue
    fi
    moved=1
    echo "$name: $image moved from $pinned to $current"
    if ! $check; then
        sed -i "s|^ARG $name=$image@$pinned\$|ARG $name=$image@$current|" "$dockerfile"
    fi
done < <(sed -n 's/^ARG \(CUDA_[A-Z_]*_IMAGE=[^ ]*@sha256:[0-9a-f]*\)$/\1/p' "$dockerfile")

if $check; then exit "$moved"; fi
