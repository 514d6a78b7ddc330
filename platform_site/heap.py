"""The cyclic garbage collector of a long-lived server process.

A web or worker process imports Django, the apps, DRF, Celery and the HTTP clients when it
starts: several hundred thousand objects that live as long as the process. CPython's collector
walks every one of them at each full collection, and starts one whenever the objects that
survived its younger collections reach a quarter of that heap. In a worker or web process
serving bench.bench's throughput figure, that was a full collection about every 23 s, each of
151-180 ms of CPU (measured with gc.callbacks): a pause of every run the process carries on
its engine loop, or of every request its threads serve.

`heap_settle()`, called once a process has started, collects what start-up left behind and
moves the rest to the collector's permanent generation (gc.freeze): a full collection then
walks only what the process allocated since, and took 11-25 ms in the same measurement.
Reference counting frees objects as before; only a reference cycle among the start-up objects
that later becomes garbage is never freed, which is why this is done once, after start-up.
(A prefork worker's children freeze again after the fork: their pages stay shared longer too.)
"""

import gc


def heap_settle() -> None:
    """Put the objects this process holds after start-up out of the collector's reach."""
    gc.collect()
    gc.freeze()
