from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "api"

    def ready(self):
        from a2a_server.cards import PATH_PREFIX
        from api.a2a import app as a2a_app
        from platform_site.asgi_mounts import asgi_mount_register

        # A2A's card and JSON-RPC endpoint are a2a-sdk's Starlette routes, served beside Django.
        asgi_mount_register(PATH_PREFIX, a2a_app)
