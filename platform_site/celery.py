import gc
import os

from celery import Celery
from celery.signals import setup_logging, worker_init, worker_process_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "platform_site.settings")

app = Celery("agentry")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
app.autodiscover_tasks(["conversations.monitoring"])


@setup_logging.connect
def _use_django_logging(**kwargs):
    """Workers log through settings.LOGGING like the web does (same format, same bound ids)
    instead of Celery replacing the root handler with its own format."""
    from logging.config import dictConfig

    from django.conf import settings

    dictConfig(settings.LOGGING)


# A worker's cyclic garbage collector starts a young collection every 700 container objects
# allocated, and a full one every hundred young ones once the survivors reach a quarter of the
# heap. The runs a worker carries all survive their young collections (each waits on its model
# for seconds), so full collections come at the rate runs are advanced, and each walks every run
# in flight besides the process's start-up heap: at 2,000 runs in flight a full collection took
# 0.3 s and garbage collection 17-19 % of a worker's CPU (3 ms a run), against 14 % at 1,000
# (gc.callbacks, bench.scale). Young collections every 10,000 objects make every generation's
# collections 14 times rarer: 4-5 % of a worker's CPU at 2,000 in flight, with the same peak
# memory (docs/benchmark.md, Scale curves).
GC_YOUNG_THRESHOLD = 10_000


@worker_init.connect
@worker_process_init.connect
def _collect_less_often(**kwargs):
    _, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)
