"""Django's PostgreSQL backend, with waits that carried code makes cooperatively.

A worker's engine loop carries hundreds of runs in one thread (platform_site.green). Their
statements wait on PostgreSQL like their model calls wait on HTTP: the loop runs other runs
meanwhile (platform_site.green_db). Each carried run borrows a pooled connection only between
two waits on the network; taking one waits cooperatively for a free slot, since a thread
blocked in the pool would stop the very runs that are about to give connections back.
"""

from django.db.backends.postgresql import base

from platform_site.green_db import connection_slot_release, connection_slot_take


class DatabaseWrapper(base.DatabaseWrapper):
    _slot = None

    def get_new_connection(self, conn_params):
        slot = connection_slot_take(self.settings_dict) if self.pool else None
        try:
            connection = super().get_new_connection(conn_params)
        except BaseException:
            connection_slot_release(slot)
            raise
        self._slot = slot
        return connection

    def _close(self):
        try:
            return super()._close()
        finally:
            slot, self._slot = self._slot, None
            connection_slot_release(slot)
