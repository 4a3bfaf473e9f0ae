"""A container's log as the kubelet serves it: the file the shim writes, its last lines (tailLines), and with
`follow` what the container writes next, until it ends, restarts or the pod is deleted."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

from localcluster.runtime.pods import ContainerRun, PodRun

POLL_SECONDS = 0.1


async def container_log(run: PodRun, ctr: ContainerRun, *, follow: bool,
                        tail_lines: int | None) -> AsyncGenerator[bytes, None]:
    while follow and not ctr.log_path.exists() and not run.deleting and not ctr.view.is_terminated:
        await asyncio.sleep(POLL_SECONDS)
    path = ctr.log_path
    if not path.exists():
        return
    with path.open("rb") as f:
        data = f.read()
        if tail_lines is not None:
            lines = data.splitlines(keepends=True)
            data = b"".join(lines[-tail_lines:]) if tail_lines > 0 else b""
        if data:
            yield data
        generation = ctr.generation
        while follow:
            chunk = f.read(65536)
            if chunk:
                yield chunk
                continue
            if run.deleting or ctr.generation != generation or not ctr.is_running:
                rest = f.read()
                if rest:
                    yield rest
                return
            await asyncio.sleep(POLL_SECONDS)
