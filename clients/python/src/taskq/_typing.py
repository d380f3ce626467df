"""The typing names the generated models use, on every Python the client
supports (3.9+) without a dependency besides httpx.

Type checkers read `typing_extensions` (their own copy of it). At run time
the models' annotations are never evaluated (the generated module starts
with `from __future__ import annotations`), so on Pythons older than 3.11
`NotRequired` and `TypeAlias` only need to exist.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing_extensions import NotRequired, TypeAlias, TypedDict
elif sys.version_info >= (3, 11):
    from typing import NotRequired, TypeAlias, TypedDict
else:
    from typing import Any, TypedDict

    NotRequired = Any
    TypeAlias = Any

__all__ = ["NotRequired", "TypeAlias", "TypedDict"]
