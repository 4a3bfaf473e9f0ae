#!/usr/bin/env bash
# DistributeTrain base-image entrypoint: `worker` runs sshd for the chief's horovodrun, `launcher` runs the
# chief's launcher. Anything else is executed as given (e.g. `bash` to debug an image).
#
# The job's key pair comes per job from a Secret mounted read-only; nothing secret is in the image. The mount is
# root-owned with group/world-readable files, which ssh and sshd refuse, so the files are copied to a private
# directory with the running user's ownership: the directory 0700, the files 0600.
#
# Every path can be overridden (the local cluster runs this file as a plain process, with a sandbox $HOME):
#   DT_SSH_DIR             the mounted Secret                  [/etc/distributetrain/ssh]
#   DT_SSH_INSTALL_DIR     where the key is installed          [$HOME/.ssh]
#   DT_STATE_DIR           host keys and sshd pid file         [/run/distributetrain as root, else $HOME/.distributetrain]
#   DT_SSHD_CONFIG         the fixed sshd settings             [sshd_config beside this script, else
#                                                              /opt/distributetrain/sshd_config]
#   DT_SSHD_BIN            sshd (an absolute path)             [/usr/sbin/sshd]
#   DT_SSH_PORT            the port sshd listens on            [2222]
#   DT_SSHD_LISTEN_ADDRESS one address to listen on            [all]
#   DT_SSHD_STRICT_MODES   sshd StrictModes                    [yes]; `no` only when the key directory must
#                          live under a world-writable parent such as /tmp
#   DT_PYTHON              the Python with distributetrain     [python3]
#   DT_NSS_WRAPPER         libnss_wrapper.so, for a UID with no account (below)  [found in the usual places]
#   DT_ACCOUNT_DIR         where that account's passwd, group and home go      [${TMPDIR:-/tmp}/distributetrain-UID]
#
# A UID with no account. OpenShift's restricted-v2 SCC (and any runAsUser the image does not know) runs the
# container as an arbitrary UID, group 0, HOME=/, with no line in /etc/passwd; ssh ("No user exists for
# uid"), sshd and Python's pwd need one. The entrypoint then writes a passwd and a group file of its own
# (the account `trainer`, home a fresh private directory) and loads them through nss_wrapper (LD_PRELOAD,
# NSS_WRAPPER_PASSWD, NSS_WRAPPER_GROUP): for itself, the launcher and horovodrun's ssh by the environment,
# and for the ranks sshd starts by sshd's SetEnv (a session's environment is sshd's to build).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
uid=$(id -u)
session_env=()  # what sshd gives the ranks it starts (SetEnv): one option, sshd keeps only the first

find_nss_wrapper() {
    local candidate
    for candidate in "${DT_NSS_WRAPPER:-}" /usr/lib/x86_64-linux-gnu/libnss_wrapper.so \
        /usr/lib/aarch64-linux-gnu/libnss_wrapper.so /usr/lib64/libnss_wrapper.so /usr/lib/libnss_wrapper.so; do
        [ -n "$candidate" ] && [ -e "$candidate" ] && { echo "$candidate"; return 0; }
    done
    return 1
}

if ! getent passwd "$uid" >/dev/null; then
    lib=$(find_nss_wrapper) || { echo "entrypoint: error: uid $uid has no account and nss_wrapper" \
        "(libnss-wrapper) is not installed: ssh and sshd need an account" >&2; exit 2; }
    account_dir=${DT_ACCOUNT_DIR:-${TMPDIR:-/tmp}/distributetrain-$uid}
    (umask 077 && mkdir -p "$account_dir/home")
    chmod 0700 "$account_dir" "$account_dir/home"
    gid=$(id -g)
    # `*`, not `x` or `!`: no password, not locked (sshd refuses a locked account). The image's own `trainer`
    # (uid 10001) is left out: getpwnam finds the first line of a name, and sshd, which can log in only the
    # user it runs as, would find that one and refuse every key.
    { grep -v "^trainer:" /etc/passwd || true
      echo "trainer:*:$uid:$gid:DistributeTrain:$account_dir/home:/bin/bash"; } \
        > "$account_dir/passwd"
    { cat /etc/group; getent group "$gid" >/dev/null || echo "trainer:x:$gid:"; } > "$account_dir/group"
    export LD_PRELOAD=$lib NSS_WRAPPER_PASSWD=$account_dir/passwd NSS_WRAPPER_GROUP=$account_dir/group
    export HOME=$account_dir/home USER=trainer LOGNAME=trainer
    session_env+=("LD_PRELOAD=$lib" "NSS_WRAPPER_PASSWD=$NSS_WRAPPER_PASSWD" "NSS_WRAPPER_GROUP=$NSS_WRAPPER_GROUP")
fi
user=$(id -un)
home=${HOME:-$(getent passwd "$user" | cut -d: -f6)}
secret_dir=${DT_SSH_DIR:-/etc/distributetrain/ssh}
ssh_dir=${DT_SSH_INSTALL_DIR:-$home/.ssh}
if [ "$(id -u)" -eq 0 ]; then default_state=/run/distributetrain; else default_state=$home/.distributetrain; fi
state_dir=${DT_STATE_DIR:-$default_state}
port=${DT_SSH_PORT:-2222}

log() { echo "entrypoint: $*" >&2; }
die() { log "error: $*"; exit 2; }

# Copy one file out of the read-only mount: the user owns it (cp creates it so), mode set before any content.
install_file() {
    local src=$1 dst=$2
    [ -s "$src" ] || die "$src is missing or empty: is the job's Secret mounted at $secret_dir?"
    rm -f "$dst"
    (umask 077 && cp "$src" "$dst")
    chmod 0600 "$dst"
}

install_keys() {  # $1: worker (authorized_keys only) or launcher (also the private key)
    umask 077
    mkdir -p "$ssh_dir"
    chmod 0700 "$ssh_dir"
    if [ -s "$secret_dir/authorized_keys" ]; then
        install_file "$secret_dir/authorized_keys" "$ssh_dir/authorized_keys"
    else
        install_file "$secret_dir/id_ed25519.pub" "$ssh_dir/authorized_keys"
    fi
    if [ "$1" = launcher ]; then
        install_file "$secret_dir/id_ed25519" "$ssh_dir/id_ed25519"
        export DT_SSH_IDENTITY="$ssh_dir/id_ed25519"
    fi
}

# The variables the pod template sets (DT_POD_ENV names them), as this pod sees them, for the ranks sshd starts
# here: Horovod's Gloo launcher gives every rank the chief's environment; each rank then loads this file
# (the launcher's shim), so a variable set only in the worker template, or set differently there, reaches it.
save_pod_env() {
    [ -n "${DT_POD_ENV:-}" ] || return 0
    local file=$state_dir/pod-env name names
    IFS=, read -r -a names <<< "$DT_POD_ENV"
    (umask 077 && : > "$file")
    for name in "${names[@]}"; do
        [[ $name =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] && [ -n "${!name+set}" ] || continue
        # POSIX single quotes (the ranks' shim is sh): each ' becomes '\''
        local value=${!name}
        printf "export %s='%s'\n" "$name" "${value//\'/\'\\\'\'}" >> "$file"
    done
    session_env+=("DT_HOST_ENV_FILE=$file")
}

worker() {
    install_keys worker
    mkdir -p "$state_dir"
    chmod 0700 "$state_dir"
    # Host keys are made at start, never shipped in the image: each pod has its own.
    local host_key=$state_dir/ssh_host_ed25519_key
    [ -s "$host_key" ] || ssh-keygen -q -t ed25519 -N '' -C "$user@$(hostname)" -f "$host_key"
    if [ "$(id -u)" -eq 0 ]; then
        # sshd as root insists on its compiled-in privilege-separation directory; /run is a tmpfs, so make it
        # on every start.
        mkdir -p /run/sshd 2>/dev/null || [ -d /run/sshd ] || die "cannot create /run/sshd"
    fi
    local config=${DT_SSHD_CONFIG:-$here/sshd_config}
    [ -e "$config" ] || config=/opt/distributetrain/sshd_config
    local args=(
        -D -e -f "$config" -p "$port"
        -o "HostKey=$host_key"
        -o "AuthorizedKeysFile=$ssh_dir/authorized_keys"
        -o "AllowUsers=$user"
        -o "StrictModes=${DT_SSHD_STRICT_MODES:-yes}"
        -o "PidFile=$state_dir/sshd.pid"
    )
    [ -z "${DT_SSHD_LISTEN_ADDRESS:-}" ] || args+=(-o "ListenAddress=$DT_SSHD_LISTEN_ADDRESS")
    save_pod_env
    [ ${#session_env[@]} -eq 0 ] || args+=(-o "SetEnv=${session_env[*]}")
    log "sshd for user $user on port $port, key-only (authorized_keys: $ssh_dir/authorized_keys)"
    "${DT_SSHD_BIN:-/usr/sbin/sshd}" "${args[@]}" &
    sshd_pid=$!
    trap on_notice TERM
    # `wait` returns early when the trap runs: wait again until sshd itself has ended
    while kill -0 "$sshd_pid" 2>/dev/null; do wait "$sshd_pid" || true; done
    wait "$sshd_pid"
}

# The kubelet's SIGTERM is a graceful notice (a drain, a preemption, a node shutting down, or the job's end):
# this pod's training processes are told (Train.py saves a checkpoint of the step and every rank stops) and
# sshd serves on until they have ended, within the pod's grace period. With none running, sshd stops at once.
rank_pids() {  # Horovod's processes on this pod: their environment carries HOROVOD_RANK
    local environ pid
    for environ in /proc/[0-9]*/environ; do
        pid=${environ#/proc/}
        pid=${pid%/environ}
        [ "$pid" != "$$" ] || continue
        if tr '\0' '\n' < "$environ" 2>/dev/null | grep -q '^HOROVOD_RANK='; then echo "$pid"; fi
    done
}

on_notice() {
    local pids
    pids=$(rank_pids)
    if [ -n "$pids" ]; then
        log "SIGTERM: telling this pod's training processes ($(echo "$pids" | wc -l)) to checkpoint and stop"
        # shellcheck disable=SC2086 # one pid per word
        kill -TERM $pids 2>/dev/null || true
        while [ -n "$(rank_pids)" ]; do sleep 0.5; done
    fi
    kill -TERM "$sshd_pid" 2>/dev/null || true
}

launcher() {
    install_keys launcher
    exec "${DT_PYTHON:-python3}" -m distributetrain.chief.launcher "$@"
}

mode=${1:-worker}
[ $# -eq 0 ] || shift
case "$mode" in
    worker) worker ;;
    launcher) launcher "$@" ;;
    *) exec "$mode" "$@" ;;
esac
