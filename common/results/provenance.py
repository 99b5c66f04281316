"""Where a report's records come from: one line for the headline wherever they mix commits,
record schemas, machines or framework versions (a comparison across any of these compares them
too), and the environment columns that say it per run."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

MACHINE = ("cpu_model", "cores", "memory_gib")


def short_commit(commit: str | None) -> str | None:
    """A commit as 10 hex digits, keeping a '-dirty' suffix (like the spec's 10)."""
    return commit and commit[:10] + commit[40:]


def machine(record: dict) -> str:
    """The machine a record ran on, as the report names it: CPU model, cores and memory."""
    env = record["env"]
    memory = env.get("memory_gib")
    return (f"{env['cpu_model']}, {env['cores']} cores"
            + (f", {memory:.0f} GiB" if memory is not None else ""))


def libraries(record: dict) -> str | None:
    """numpy's and the framework's companions' versions ('numpy 2.4.6, jaxlib 0.10.2'); None
    for records before schema 10, which did not keep them."""
    found = record["env"].get("libraries")
    if found is None:
        return None
    return ", ".join(f"{name} {version}" for name, version in found.items()
                     if version is not None) or None


def allocator(record: dict) -> str | None:
    settings = record["env"].get("allocator")
    return "; ".join(f"{k}={v}" for k, v in sorted(settings.items())) if settings else None


def _versions(record: dict) -> str:
    return f"{record['framework']} {record['env']['framework_version']}"


FACETS: tuple[tuple[str, Callable[[dict], object]], ...] = (
    ("commits", lambda r: short_commit(r["env"]["git_commit"]) or "unknown"),
    ("record schemas", lambda r: f"v{r['schema_version']}"),
    ("machines", machine),
)


def _counted(values: list[object]) -> str:
    return ", ".join(f"{value} ({n})" for value, n in Counter(map(str, values)).most_common())


def provenance_lines(records: list[dict]) -> list[str]:
    """One sentence per way the records are mixed (commits, schemas, machines, versions of one
    framework), counting the records of each; none when they all agree."""
    lines = [f"The records come from {len(set(map(str, values)))} {name}: {_counted(values)}."
             for name, get in FACETS
             if len(set(map(str, values := [get(r) for r in records]))) > 1]
    for framework in dict.fromkeys(r["framework"] for r in records):
        # a run that failed before its framework said its version has none to compare
        versions = [_versions(r) for r in records if r["framework"] == framework
                    and r["env"]["framework_version"] is not None]
        if len(set(versions)) > 1:
            lines.append(f"The {framework} records come from {len(set(versions))} versions: "
                         f"{_counted(versions)}.")
    return lines
