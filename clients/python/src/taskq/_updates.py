"""The worker's writes (renewals, completions, failures, releases) sent
together: items that are waiting when a request leaves go in it, up to the
server's 25 per call, so a busy worker makes one request for many tasks.

Each item's caller gets its own result item. An update answers per item
(`lease lost` for one task does not fail the others); a refused call (400)
of several items is sent again item by item, so one bad item cannot sink
the rest. A call whose connection broke is sent again: every item carries
its `lease_id`, so a repeat either applies as the first would have or
answers `lease lost`, which the worker then checks.

Items that finish a task (completions, failures, releases) leave before
renewals: when the org's write limit lets few calls through, the work
done lands first, and the renewals that wait meanwhile go together.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from ._errors import ApiError
from ._operations import OPERATIONS

if TYPE_CHECKING:
    from ._client import AsyncClient

BATCH = 25
#: Requests under way at once; more items wait for the next one.
SENDERS = 4

Pending = Tuple[Dict[str, Any], "asyncio.Future[Dict[str, Any]]"]
#: Queue ranks: what finishes a task, then renewals, then the senders' stop.
FINISHING, RENEWAL, CLOSE = 0, 1, 2


class Updates:
    def __init__(self, client: AsyncClient) -> None:
        self._client = client
        self._order = itertools.count()
        self._queue: asyncio.PriorityQueue[Tuple[int, int, Optional[Pending]]] = asyncio.PriorityQueue()
        self._senders = [asyncio.ensure_future(self._sender()) for _ in range(SENDERS)]

    async def send(self, item: Dict[str, Any]) -> Dict[str, Any]:
        """Sends one update item; answers its result item (`{task_id,
        status, updated_at}` or `{task_id, error}`). An item with no
        `status` is a renewal, sent after those that finish a task."""
        future: asyncio.Future[Dict[str, Any]] = asyncio.get_running_loop().create_future()
        rank = RENEWAL if "status" not in item else FINISHING
        await self._queue.put((rank, next(self._order), (item, future)))
        return await future

    async def close(self) -> None:
        for _ in self._senders:
            await self._queue.put((CLOSE, next(self._order), None))
        await asyncio.gather(*self._senders, return_exceptions=True)

    async def _sender(self) -> None:
        while True:
            rank, order, first = await self._queue.get()
            if first is None:
                return
            batch: List[Pending] = [first]
            while len(batch) < BATCH and not self._queue.empty():
                rank, order, more = self._queue.get_nowait()
                if more is None:
                    await self._queue.put((rank, order, None))
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
