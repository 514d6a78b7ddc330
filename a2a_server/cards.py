"""An exposed agent's A2A agent card: its name, description and one skill (talking to it), its
JSON-RPC endpoint, streaming and push notifications, and the bearer API token it asks for."""

from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentProvider,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from a2a.utils.constants import PROTOCOL_VERSION_0_3, PROTOCOL_VERSION_CURRENT, TransportProtocol
from django.utils.translation import gettext as _

from agents.models import Agent

PATH_PREFIX = "/a2a/"
CARD_PATH = ".well-known/agent-card.json"
SECURITY_SCHEME = "bearerAuth"


def endpoint_path(slug: str) -> str:
    """The agent's JSON-RPC endpoint; its card is at `<endpoint>/.well-known/agent-card.json`."""
    return f"{PATH_PREFIX}{slug}"


def agent_card(*, agent: Agent, base_url: str) -> AgentCard:
    url = base_url.rstrip("/") + endpoint_path(agent.slug)
    description = agent.description or agent.name
    return AgentCard(
        name=agent.name,
        description=description,
        # The card changes when the agent is edited: its last change is the version a client caches.
        version=agent.updated_at.strftime("%Y%m%d%H%M%S"),
        provider=AgentProvider(organization="Agentry", url=base_url.rstrip("/")),
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding=TransportProtocol.JSONRPC, protocol_version=version)
            for version in (PROTOCOL_VERSION_CURRENT, PROTOCOL_VERSION_0_3)
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=True),
        security_schemes={
            SECURITY_SCHEME: SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(
                    scheme="Bearer", description=_("An Agentry API token of the agent's workspace.")
                )
            )
        },
        security_requirements=[SecurityRequirement(schemes={SECURITY_SCHEME: StringList()})],
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[
            AgentSkill(
                id=agent.slug,
                name=agent.name,
                description=description,
                tags=["agentry"],
                input_modes=["text/plain"],
                output_modes=["text/plain"],
            )
        ],
    )
