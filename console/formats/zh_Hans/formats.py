# The same moments in the same format as in English (console/formats/en): to the second, in an
# order that sorts, the time zone named. Anything not set here falls back to Django's Chinese formats.
DATE_FORMAT = "Y-m-d"
DATETIME_FORMAT = "Y-m-d H:i:s T"
SHORT_DATETIME_FORMAT = "Y-m-d H:i:s T"
TIME_FORMAT = "H:i:s"
