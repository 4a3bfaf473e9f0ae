#!/usr/bin/env bash
# distributetrain-selfcheck: what a built base image must hold, checked inside it. Run it after `docker build`:
#
#   docker run --rm --gpus all distributetrain/base:0.1.0-efa distributetrain-selfcheck
#
# and, for the fabric's devices too, in a pod that holds them (the image's checks pass without them; the
# device checks need them): kubectl exec JOB-worker-0 -- distributetrain-selfcheck
#
# Checks: Horovod's build (horovodrun --check-build: TensorFlow, Gloo, NCCL in the GPU image); Horovod starts
# (hvd.init() in one process); NCCL's library loads and its version; the fabric's libraries (DT_IMAGE_FABRIC,
# set by the image's FABRIC variant): efa - libfabric (fi_info), aws-ofi-nccl's libnccl-net.so with every
# library it needs, and `fi_info -p efa` where an EFA device is present; ib - libibverbs and its providers,
# and ibv_devinfo where an RDMA device is present; and the memlock limit RDMA registration needs.
# Prints `ok:`, `FAIL:` or `note:` per check; exits 1 when any check failed.
set -uo pipefail

fabric=${DT_IMAGE_FABRIC:-none}
python=${DT_PYTHON:-python3}
failed=0
ok() { echo "ok:   $*"; }
bad() { echo "FAIL: $*"; failed=1; }
note() { echo "note: $*"; }
indent() { sed 's/^/      /'; }

# ---- Horovod -----------------------------------------------------------------------------------------------
if out=$(horovodrun --check-build 2>&1); then
    ok "horovodrun --check-build"
    echo "$out" | grep -E '\[(X| )\]' | indent
else
    bad "horovodrun --check-build failed:"
    echo "$out" | tail -5 | indent
fi
init='import horovod.tensorflow as hvd; hvd.init()
print(f"size={hvd.size()} rank={hvd.rank()} nccl_built={int(bool(hvd.nccl_built()))} gloo_built={hvd.gloo_built()}")'
nccl_built=0
if out=$(TF_CPP_MIN_LOG_LEVEL=2 "$python" -c "$init" 2>&1); then
    ok "import horovod.tensorflow as hvd; hvd.init(): $(echo "$out" | tail -1)"
    case "$(echo "$out" | tail -1)" in *nccl_built=1*) nccl_built=1 ;; esac
else
    bad "hvd.init() failed:"
    echo "$out" | tail -5 | indent
fi

# ---- NCCL --------------------------------------------------------------------------------------------------
version='import ctypes
lib = ctypes.CDLL("libnccl.so.2"); v = ctypes.c_int(); lib.ncclGetVersion(ctypes.byref(v))
print(f"{v.value // 10000}.{v.value // 100 % 100}.{v.value % 100}")'
if out=$("$python" -c "$version" 2>&1); then
    ok "NCCL $out (libnccl.so.2)"
elif [ "$nccl_built" = 1 ]; then
    bad "Horovod was built with NCCL but libnccl.so.2 does not load: $(echo "$out" | tail -1)"
else
    note "no NCCL: this is the CPU build (Gloo); GPU images reduce with NCCL"
fi

# ---- the fabric ----------------------------------------------------------------------------------------------
devices() { compgen -G '/dev/infiniband/uverbs*' >/dev/null; }

# the first libnccl-net.so on the library path, as NCCL's dlopen finds it
plugin() {
    local dir
    IFS=: read -ra dirs <<< "${LD_LIBRARY_PATH:-}"
    for dir in "${dirs[@]}"; do
        if [ -n "$dir" ] && [ -e "$dir/libnccl-net.so" ]; then echo "$dir/libnccl-net.so"; return 0; fi
    done
    return 1
}

memlock() {
    local limit
    limit=$(ulimit -l)
    if [ "$limit" = unlimited ]; then
        ok "memlock unlimited (RDMA registers GPU and host buffers)"
    else
        note "memlock is ${limit} KiB: RDMA memory registration may fail (ibv_reg_mr: Cannot allocate memory);" \
             "the node's container runtime sets it (containerd's LimitMEMLOCK; EKS AMIs: unlimited)," \
             "or the pod needs IPC_LOCK as root (docs/real-cluster.md)"
    fi
}

case "$fabric" in
    none)
        note "FABRIC=none: NCCL crosses nodes over TCP sockets (build with --build-arg FABRIC=efa or ib)" ;;
    efa)
        if out=$(fi_info --version 2>&1); then ok "libfabric: $(echo "$out" | head -2 | tr '\n' ' ')"
        else bad "fi_info (libfabric) missing: $out"; fi
        if lib=$(plugin); then
            missing=$(ldd "$lib" 2>&1 | grep 'not found')
            if [ -z "$missing" ]; then ok "aws-ofi-nccl: $lib loads"
            else bad "aws-ofi-nccl: $lib lacks libraries:"; echo "$missing" | indent; fi
        else
            bad "aws-ofi-nccl: no libnccl-net.so on LD_LIBRARY_PATH (${LD_LIBRARY_PATH:-empty}): NCCL would use TCP"
        fi
        if devices; then
            if out=$(fi_info -p efa -t FI_EP_RDM 2>&1); then ok "fi_info -p efa: $(echo "$out" | grep -c 'provider: efa') EFA endpoint(s)"
            else bad "fi_info -p efa found no EFA endpoint though /dev/infiniband is there:"; echo "$out" | tail -3 | indent; fi
            memlock
        else
            note "no EFA device in this container: run it in a pod holding vpc.amazonaws.com/efa to check fi_info -p efa"
        fi ;;
    ib)
        if out=$("$python" -c 'import ctypes; ctypes.CDLL("libibverbs.so.1")' 2>&1); then ok "libibverbs.so.1 loads"
        else bad "libibverbs.so.1 does not load: $out"; fi
        if compgen -G '/usr/lib/*/libibverbs/libmlx5-rdmav*.so' >/dev/null; then ok "rdma-core providers (mlx5, ...)"
        else bad "rdma-core's providers (ibverbs-providers) are missing"; fi
        if devices; then
            if out=$(ibv_devinfo -l 2>&1) && ! echo "$out" | grep -q '^0 HCA'; then ok "ibv_devinfo: $(echo "$out" | tr '\n' ' ')"
            else bad "ibv_devinfo lists no HCA though /dev/infiniband is there: $out"; fi
            memlock
        else
            note "no RDMA device in this container: run it in a pod holding the RDMA resource to check the HCAs"
        fi ;;
    *)
        bad "DT_IMAGE_FABRIC=$fabric: expected none, efa or ib" ;;
esac

if [ "$failed" -ne 0 ]; then echo "selfcheck: FAILED"; else echo "selfcheck: passed"; fi
exit "$failed"
