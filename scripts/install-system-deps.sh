#!/usr/bin/env bash
# Install the Debian packages DistributeTrain's local cluster and tests need, when missing.
# openssh-server: worker pods run sshd; iproute2: network namespaces per pod; cmake: builds Horovod;
# nftables: the process runtime enforces NetworkPolicy with nft rules on the cluster's bridge.
# libnss-wrapper: job pods under a UID with no account (OpenShift's restricted-v2) give ssh and sshd one.
set -euo pipefail
need=()
command -v /usr/sbin/sshd >/dev/null || need+=(openssh-server)
command -v ip >/dev/null || need+=(iproute2)
command -v nft >/dev/null || need+=(nftables)
command -v cmake >/dev/null || need+=(cmake)
command -v unshare >/dev/null || need+=(util-linux)
command -v g++ >/dev/null || need+=(g++)
compgen -G "/usr/lib*/*libnss_wrapper.so" >/dev/null || compgen -G "/usr/lib/*/libnss_wrapper.so" >/dev/null \
  || need+=(libnss-wrapper)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "install-system-deps: missing ${need[*]}; install them as root: apt-get install ${need[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${need[@]}"
