"""Signing in over plain HTTP while cookies are HTTPS-only.

Outside debug the session and CSRF cookies are Secure (platform_site/settings.py), and a browser
keeps no Secure cookie from a plain-HTTP page: a deployment without TLS answers the admin's login
with Django's bare "CSRF verification failed" (the CSRF cookie was never kept), or with the login
page again (the session cookie was not). The login page says so before the operator tries, and
the CSRF failure page says why it failed; both name the settings to change.
"""

from django.conf import settings
from django.shortcuts import render
from django.utils.translation import gettext as _
from django.views.csrf import csrf_failure as django_csrf_failure

SECURE_COOKIE_SETTINGS = ("SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE")


def cookie_problem(request) -> list[str]:
    """Why signing in will fail on this request, as paragraphs in the request's language; empty
    when it came over HTTPS (as Django sees it) or no cookie is HTTPS-only."""
    if request.is_secure():
        return []
    names = [name for name in SECURE_COOKIE_SETTINGS if getattr(settings, name)]
    if not names:
        return []
    return [
        _(
            "This page came over plain HTTP, but the sign-in cookies may only travel over HTTPS "
            "(%(settings)s), so the browser will not keep them and signing in will fail."
        )
        % {"settings": ", ".join(names)},
        _(
            "Serve the site over HTTPS. Behind a TLS proxy, set AGENTRY_TRUST_X_FORWARDED_PROTO=1 so "
            "the proxy's HTTPS is recognised. Only on a trusted network without TLS, set "
            "SESSION_COOKIE_SECURE=0 and CSRF_COOKIE_SECURE=0 in the web's environment and restart it."
        ),
    ]


def login_context(request) -> dict:
    """Context processor: the login pages' warning (admin/login.html)."""
    return {"plain_http_cookie_problem": cookie_problem(request)}


def csrf_failure(request, reason: str = ""):
    """CSRF_FAILURE_VIEW: the reason in the operator's language when the CSRF cookie could not
    be kept over plain HTTP; Django's own page otherwise."""
    problem = cookie_problem(request)
    if not problem:
        return django_csrf_failure(request, reason)
    context = {"title": _("Signing in needs HTTPS"), "problem": problem, "reason": reason}
    return render(request, "plain_http_csrf.html", context, status=403)
