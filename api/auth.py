from django.utils.translation import gettext as _
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from conversations.tokens import api_token_authenticate
from workspaces.access import workspace_bind


class ApiTokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer <token>` (what OpenAI clients send) or `Authorization: Token <token>`."""

    keywords = ("bearer", "token")

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower().decode() not in self.keywords:
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed(_("Malformed Authorization header; use 'Bearer <token>'."))
        try:
            plaintext = header[1].decode()
        except UnicodeError:
            raise exceptions.AuthenticationFailed(_("The token contains invalid characters.")) from None
        token = api_token_authenticate(plaintext=plaintext)
        if token is None:
            raise exceptions.AuthenticationFailed(_("Invalid or revoked token."))
        # The token's workspace, role and scopes answer every permission and list of this request.
        workspace_bind(token.user, token.binding)
        return token.user, token

    def authenticate_header(self, request):
        return 'Bearer realm="api"'


class ApiTokenScheme(OpenApiAuthenticationExtension):
    target_class = "api.auth.ApiTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer"}
