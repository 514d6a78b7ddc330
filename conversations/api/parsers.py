import io

from django.conf import settings
from rest_framework.parsers import JSONParser

from platform_site.api_errors import RequestTooLarge


class LimitedJSONParser(JSONParser):
    """JSON bodies up to DATA_UPLOAD_MAX_MEMORY_SIZE bytes.

    DRF reads JSON from the raw stream, past Django's own size check, so the limit is applied
    here: reading one byte more than allowed is enough to tell, whatever Content-Length says.
    """

    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        body = stream.read() if limit is None else stream.read(limit + 1)
        if limit is not None and len(body) > limit:
            raise RequestTooLarge.over_limit()
        return super().parse(io.BytesIO(body), media_type, parser_context)
