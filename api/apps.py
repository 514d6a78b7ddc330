from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "api"

    def ready(self):
        from a2a_server.cards import PATH_PREFIX
        from api.a2a import app as a2a_app
        from api.mcp_server import PATHS as MCP_PATHS
        from api.mcp_server import mcp_application
        from platform_site.asgi_mounts import asgi_mount_register, asgi_path_register

        # A2A's card and JSON-RPC endpoint are a2a-sdk's Starlette routes, served beside Django.
        asgi_mount_register(PATH_PREFIX, a2a_app)
        # The MCP server is the MCP SDK's transport, behind the API token (api.mcp_server).
        asgi_path_register(MCP_PATHS, mcp_application)
