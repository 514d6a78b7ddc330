"""Which process the dashboard can tell is missing, so its hint names that one.

The page knows the workers from a ping (console.monitoring.broker) and knows beat only from its
effect: the hourly rollups are rebuilt by a task that beat sends to the maintenance queue and a
worker runs, so stale rollups alone cannot tell a missing beat from a missing worker. Ordered:
1. no worker answers the ping: "worker" (the runs stay queued, whatever beat does);
2. rollups stale while messages wait in the maintenance queue: "maintenance" (beat sends, but
   no worker serves that queue);
3. rollups stale with workers answering: "beat";
4. otherwise, or while the ping's first answer is pending: "".
"""

WORKER, MAINTENANCE_QUEUE, BEAT = "worker", "maintenance", "beat"


def missing_process(snapshot: dict) -> str:
    workers = snapshot.get("workers") or {}
    if workers.get("pending"):
        return ""
    if not workers.get("online"):
        return WORKER
    if not (snapshot.get("rollups") or {}).get("stale"):
        return ""
    queues = (snapshot.get("broker") or {}).get("queues") or []
    if any(q["name"] == MAINTENANCE_QUEUE and (q.get("depth") or 0) > 0 for q in queues):
        return MAINTENANCE_QUEUE
    return BEAT
