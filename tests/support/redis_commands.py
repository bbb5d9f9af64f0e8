"""What Redis ran while a test's action ran: calls per command (INFO
commandstats, Lua scripts' own calls included) and, where the keys matter,
each command with its arguments (MONITOR)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import redis

#: Commands that walk a collection.
WALKS = {"scan", "hscan", "sscan", "zscan", "hgetall", "hvals", "hkeys", "smembers", "keys", "lrange"}


def commandstats(client: redis.Redis) -> dict[str, int]:
    """Calls per command since the server started (INFO's own calls left out)."""
    stats = client.info("commandstats")
    return {
        name.removeprefix("cmdstat_"): int(v["calls"])
        for name, v in stats.items()
        if not name.removeprefix("cmdstat_").startswith("info")
    }


def commands_of(client: redis.Redis, action: Callable[[], object]) -> dict[str, int]:
    """The Redis commands ``action`` issued (Lua scripts' own calls included), by name."""
    before = commandstats(client)
    action()
    after = commandstats(client)
    return {name: n - before.get(name, 0) for name, n in after.items() if n != before.get(name, 0)}


def fewest_commands_of(client: redis.Redis, actions: list[Callable[[], object]]) -> dict[str, int]:
    """The commands of the least noisy of ``actions``, each the same work on other
    data: INFO commandstats counts every client of the server, and another one
    (a worker's heartbeat, a test before this one) only ever adds to a count,
    so the fewest calls per command over a few tries are the action's own."""
    counts = [commands_of(client, action) for action in actions]
    return min(counts, key=lambda c: sum(c.values()))


def monitored(client: redis.Redis, action: Callable[[], None]) -> list[str]:
    """The commands (with their keys) Redis ran while ``action`` ran, as MONITOR shows them."""
    marker = "monitored-action-done"
    seen: list[str] = []
    started = threading.Event()

    def watch() -> None:
        # redis-py leaves monitor() unannotated.
        with client.monitor() as monitor:  # type: ignore[no-untyped-call]  # MONITOR is on when this returns
            started.set()
            for event in monitor.listen():
                if marker in event["command"]:
                    return
                seen.append(event["command"])

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    assert started.wait(10)
    action()
    client.echo(marker)
    watcher.join(30)
    assert not watcher.is_alive(), "MONITOR never saw the marker"
    return seen
