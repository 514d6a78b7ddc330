# Operators read the ledger to the second (a retry 2 s after a failure, a lease that lapsed):
# the admin prints times with seconds, in an order that sorts, and names the time zone (the
# site's TIME_ZONE), as the monitoring and approval pages do (console.formatting.local_time).
# Anything not set here falls back to Django's English formats.
DATE_FORMAT = "Y-m-d"
DATETIME_FORMAT = "Y-m-d H:i:s T"
SHORT_DATETIME_FORMAT = "Y-m-d H:i:s T"
TIME_FORMAT = "H:i:s"
