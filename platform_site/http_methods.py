"""Django's require_GET/require_POST, answering a wrong method with a JSON 405 in the error
shape (see api_errors.error_json) instead of an empty page.

The decorated view also carries `allowed_methods`, which MethodNotAllowedMiddleware reads to
answer before CSRF checking does: otherwise a PUT to a POST-only page would get Django's HTML
"CSRF verification failed" page, and a POST to a GET-only page the same.
"""

from functools import wraps

from asgiref.sync import iscoroutinefunction

from platform_site.error_responses import method_not_allowed


def require_http_methods(methods):
    allowed = frozenset(method.upper() for method in methods)

    def decorator(view):
        if iscoroutinefunction(view):

            @wraps(view)
            async def wrapper(request, *args, **kwargs):
                if request.method not in allowed:
                    return method_not_allowed(request, allowed)
                return await view(request, *args, **kwargs)
        else:

            @wraps(view)
            def wrapper(request, *args, **kwargs):
                if request.method not in allowed:
                    return method_not_allowed(request, allowed)
                return view(request, *args, **kwargs)

        wrapper.allowed_methods = allowed
        return wrapper

    return decorator


require_GET = require_http_methods(["GET", "HEAD"])
require_POST = require_http_methods(["POST"])
