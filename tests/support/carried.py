"""Running plain code the way a worker's engine loop carries it (platform_site.green)."""

import asyncio

from platform_site import green, green_db
from platform_site.green_http import carried_clients_close


def carry(fn, /, *args, **kwargs):
    """fn(*args, **kwargs) in a carried greenlet on a fresh event loop; its waits are awaited."""
    green_db.install()

    async def main():
        try:
            return await green.spawn(fn, *args, **kwargs)
        finally:
            await carried_clients_close(asyncio.get_running_loop())

    return asyncio.run(main())
