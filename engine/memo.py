"""Values computed from one immutable object, remembered by that object's identity.

The engine's models (an :class:`~engine.model.architecture.Architecture`, a scenario) are frozen, but hashing one by
value costs as much as some of the sums asked of it, and a fit matrix or a plan search asks the same sums of the same
object thousands of times. :func:`by_identity` keys on ``id(obj)`` and keeps the object itself beside the value: a kept
object cannot be collected, so its id cannot be reused for another object while the entry lives, and the ``is`` check
guards the rest. Errors are never cached. The cache is cleared whole when it reaches its size (the working set of a
page or a benchmark is far smaller).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def by_identity(size: int = 256) -> Callable[[Callable[[T], R]], Callable[[T], R]]:
    """Decorator: remember ``fn(obj)`` per object (``obj`` must be immutable, as the engine's frozen models are).

    The wrapped function gains ``cache_clear()``. Callers must not mutate a returned value (return a copy to
    callers that might).
    """
    def decorate(fn: Callable[[T], R]) -> Callable[[T], R]:
        cache: dict[int, tuple[Any, Any]] = {}

        @functools.wraps(fn)
        def wrapper(obj: T) -> R:
            hit = cache.get(id(obj))
            if hit is not None and hit[0] is obj:
                return hit[1]
            value = fn(obj)
            if len(cache) >= size:
                cache.clear()
            cache[id(obj)] = (obj, value)
            return value

        wrapper.cache_clear = cache.clear  # type: ignore[attr-defined]
        return wrapper
    return decorate
