"""Work for every ps at once: a thread per ps runs that ps's items in order, so each ps writes (or reads) its rows
while the others do theirs, and holds one item's rows at a time. An eager op sent to a ps returns once that ps has
run it, so items sent from one thread would go one ps after the other."""

from __future__ import annotations

import threading
from typing import Callable, Iterable, TypeVar

Item = TypeVar("Item")


def on_each_ps(items: Iterable[Item], device_of: Callable[[Item], str], work: Callable[[Item], None]) -> None:
    """Runs `work(item)` for every item, the items of one device in order on a thread of their own, the devices
    at once; returns when every thread is done, raising the first error any met (the others finish first)."""
    queues: dict[str, list] = {}
    for item in items:
        queues.setdefault(device_of(item), []).append(item)
    errors: list[BaseException] = []

    def run(queue: list) -> None:
        try:
            for item in queue:
                work(item)
        except BaseException as error:  # noqa: BLE001 - raised below, on the calling thread
            errors.append(error)

    threads = [threading.Thread(target=run, args=(queue,), name=f"rows-on-{device}", daemon=True)
               for device, queue in queues.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
