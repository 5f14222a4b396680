"""What confinement adds to starting a command, measured side by side with a plain spawn.

    python -m benchmarks.confinement_overhead [--runs N]

Each run starts ``touch <a file outside the workspace>`` twice, interleaved: once as a plain
child process (``anyio.open_process``, new session, the same minimal environment: the
unconfined spawn) and once through the launcher with the full confinement of a command that may
write the workspace (Landlock, seccomp, limits, no capabilities, read-only mounts; with and
without namespaces). The workspace is a repository with a nested one among
``PROJECT_DIRECTORIES`` directories, and the confined run includes what the sandbox does per
command that may write: searching the roots for ``.git`` entries (to keep them read-only)
before, and again after (to report new ones), with one ``ProtectedEntrySearch`` across all
runs as a sandbox keeps one across its commands: each search lists again only the directories
that changed (none here), and lstats the rest. The workspace is left ``RACY_MARGIN_NS`` (2 s)
after it is made before the runs start, as a project is older than that (until then every
search lists every directory: ``listed_per_search`` says how many the measured ones listed).
Times run from the request to the observed exit.
The exit code proves each run did the work it names: the plain ``touch`` succeeds (and the
marker is removed after it), the confined one is refused by the kernel.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import anyio.to_thread

from benchmarks.stats import summary
from providers.sandbox.confinement import (
    RACY_MARGIN_NS,
    ProtectedEntries,
    ProtectedEntrySearch,
    carved_paths,
    command_environment,
    command_policy,
)
from providers.sandbox.launcher_client import CommandLauncher
from providers.sandbox.program_paths import default_search_path, resolve_program

TARGET_P95_OVERHEAD_MS = 5.0
PROJECT_DIRECTORIES = 200


async def plain(touch: str, marker: Path, workspace: Path, environment: dict[str, str]) -> float:
    started = time.perf_counter()
    process = await anyio.open_process(
        [touch, str(marker)], cwd=workspace, env=environment, start_new_session=True
    )
    async with process:
        code = await process.wait()
    elapsed = (time.perf_counter() - started) * 1000.0
    assert code == 0, "the plain spawn failed"
    os.unlink(marker)  # it ran: touch created the marker
    return elapsed


async def confined(
    launcher: CommandLauncher, policy: Callable[[ProtectedEntries], dict[str, object]],
    search: ProtectedEntrySearch, listed: list[int],
) -> float:  # fmt: skip
    started = time.perf_counter()
    before = await anyio.to_thread.run_sync(search.search)
    listed.append(search.listed)
    process = await launcher.spawn(policy(before))
    code = await process.wait()
    process.close()
    after = await anyio.to_thread.run_sync(search.search)
    elapsed = (time.perf_counter() - started) * 1000.0
    listed.append(search.listed)
    assert len(before.found) == 2, "the search missed a repository"
    assert not after.added_since(before)
    assert code == 1, f"the confinement did not hold (touch exited {code})"
    return elapsed


async def measure(runs: int, namespaces: bool) -> dict[str, dict[str, float]]:
    with tempfile.TemporaryDirectory() as base:
        workspace, temporary = Path(base, "ws"), Path(base, "tmp")
        for index in range(PROJECT_DIRECTORIES):
            os.makedirs(workspace / f"pkg{index // 20}" / f"mod{index % 20}")
        for repository in (workspace, workspace / "pkg0"):
            (repository / ".git" / "hooks").mkdir(parents=True)
        made = time.monotonic()
        os.mkdir(temporary)
        marker = Path(base, "outside-marker")
        search_path = default_search_path([workspace])
        touch = resolve_program("touch", search_path)
        assert touch is not None
        environment = command_environment(search_path, str(temporary))

        def policy(found: ProtectedEntries) -> dict[str, object]:
            return command_policy(
                program=touch,
                argv=["touch", str(marker)],
                cwd=workspace,
                environment=environment,
                roots=[workspace],
                carved=carved_paths([workspace], [], [], found.found),
                temporary=str(temporary),
                writable=True,
                network=False,
                namespaces=namespaces,
                search_path=search_path,
            )

        launcher = CommandLauncher()
        info = await launcher.info()
        assert info.landlock_abi > 0, "no Landlock here"
        assert info.namespaces or not namespaces, "no namespaces here"
        search = ProtectedEntrySearch([workspace])
        plain_ms, confined_ms, overhead_ms = [], [], []
        listed: list[int] = []
        try:
            await anyio.sleep(made + RACY_MARGIN_NS / 1e9 - time.monotonic())
            for _ in range(10):  # warm-up
                await plain(touch, marker, workspace, environment)
                await confined(launcher, policy, search, [])
            for _ in range(runs):
                a = await plain(touch, marker, workspace, environment)
                b = await confined(launcher, policy, search, listed)
                plain_ms.append(a)
                confined_ms.append(b)
                overhead_ms.append(b - a)
        finally:
            await launcher.close()
    return {
        "unconfined_spawn": summary(plain_ms),
        "confined_spawn": summary(confined_ms),
        "overhead": summary(overhead_ms),
        "listed_per_search": {"max": float(max(listed)), "mean": sum(listed) / len(listed)},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=300)
    args = parser.parse_args()
    print(f"host: {os.cpu_count()} cores")
    for namespaces in (True, False):
        label = "landlock+seccomp+namespaces" if namespaces else "landlock+seccomp"
        result = anyio.run(measure, args.runs, namespaces)
        extra = result["confined_spawn"]["p95_ms"] - result["unconfined_spawn"]["p95_ms"]
        print(
            json.dumps(
                {
                    "benchmark": f"confinement_overhead[{label}]",
                    **{f"{k}_{m}": v for k, s in result.items() for m, v in s.items()},
                    "p95_difference_ms": extra,
                    "target_p95_overhead_ms": TARGET_P95_OVERHEAD_MS,
                }
            )
        )
        verdict = "meets" if extra < TARGET_P95_OVERHEAD_MS else "MISSES"
        print(
            f"{label}: unconfined spawn p50 {result['unconfined_spawn']['p50_ms']:.2f} / p95 "
            f"{result['unconfined_spawn']['p95_ms']:.2f} ms; confined p50 "
            f"{result['confined_spawn']['p50_ms']:.2f} / p95 "
            f"{result['confined_spawn']['p95_ms']:.2f} ms; p95 difference {extra:.2f} ms, "
            f"per-run overhead p50 {result['overhead']['p50_ms']:.2f} / p95 "
            f"{result['overhead']['p95_ms']:.2f} ms ({verdict} the < "
            f"{TARGET_P95_OVERHEAD_MS:g} ms target); each .git search listed at most "
            f"{result['listed_per_search']['max']:.0f} directories again"
        )


if __name__ == "__main__":
    main()
