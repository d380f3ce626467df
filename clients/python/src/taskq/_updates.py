"""The worker's writes (renewals, completions, failures, releases) sent
together: items that are waiting when a request leaves go in it, up to the
server's 25 per call, so a busy worker makes one request for many tasks.

Each item's caller gets its own result item. An update answers per item
(`lease lost` for one task does not fail the others); a refused call (400)
of several items is sent again item by item, so one bad item cannot sink
the rest. A call whose connection broke is sent again: every item carries
its `lease_id`, so a repeat either applies as the first would have or
answers `lease lost`, which the worker then checks.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from ._errors import ApiError
from ._operations import OPERATIONS

if TYPE_CHECKING:
    from ._client import AsyncClient

BATCH = 25
#: Requests under way at once; more items wait for the next one.
SENDERS = 4

Pending = Tuple[Dict[str, Any], "asyncio.Future[Dict[str, Any]]"]


class Updates:
    def __init__(self, client: AsyncClient) -> None:
        self._client = client
        self._queue: asyncio.Queue[Optional[Pending]] = asyncio.Queue()
        self._senders = [asyncio.ensure_future(self._sender()) for _ in range(SENDERS)]

    async def send(self, item: Dict[str, Any]) -> Dict[str, Any]:
        """Sends one update item; answers its result item (`{task_id,
        status, updated_at}` or `{task_id, error}`)."""
        future: asyncio.Future[Dict[str, Any]] = asyncio.get_running_loop().create_future()
        await self._queue.put((item, future))
        return await future

    async def close(self) -> None:
        for _ in self._senders:
            await self._queue.put(None)
        await asyncio.gather(*self._senders, return_exceptions=True)

    async def _sender(self) -> None:
        while True:
            first = await self._queue.get()
            if first is None:
                return
            batch: List[Pending] = [first]
            while len(batch) < BATCH and not self._queue.empty():
                more = self._queue.get_nowait()
                if more is None:
                    await self._queue.put(None)
                    break
                batch.append(more)
            await self._send(batch)

    async def _send(self, batch: List[Pending]) -> None:
        live = [(item, future) for item, future in batch if not future.done()]
        if not live:
            return
        try:
            answer = await self._client._invoke(
                OPERATIONS["update_tasks"],
                body={"updates": [item for item, _ in live]},
                retry_in_doubt=True,
            )
        except ApiError as error:
            if error.status == 400 and len(live) > 1:
                for one in live:
                    await self._send([one])
                return
            for _, future in live:
                if not future.done():
                    future.set_exception(error)
            return
        except Exception as error:  # noqa: BLE001 - every caller hears of it
            for _, future in live:
                if not future.done():
                    future.set_exception(error)
            return
        for (_, future), result in zip(live, answer["results"]):
            if not future.done():
                future.set_result(result)
