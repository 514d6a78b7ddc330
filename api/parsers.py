import codecs

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from platform_site.api_errors import RequestTooLarge
from platform_site.json_input import JSONInputError, json_loads_checked


class LimitedJSONParser(JSONParser):
    """JSON bodies up to DATA_UPLOAD_MAX_MEMORY_SIZE bytes, with bounded nesting and nothing
    PostgreSQL would refuse later (see platform_site.json_input).

    DRF reads JSON from the raw stream, past Django's own size check, so the limit is applied
    here: reading one byte more than allowed is enough to tell, whatever Content-Length says.
    """

    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        body = stream.read() if limit is None else stream.read(limit + 1)
        if limit is not None and len(body) > limit:
            raise RequestTooLarge.over_limit()
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            if codecs.lookup(encoding).name != "utf-8":
                body = body.decode(encoding)
            return json_loads_checked(body)
        except (JSONInputError, UnicodeDecodeError, LookupError) as exc:
            raise ParseError(str(exc)) from None
