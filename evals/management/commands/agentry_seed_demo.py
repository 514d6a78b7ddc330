import os

from django.core.management.base import BaseCommand

from agents.demo import demo_seed


class Command(BaseCommand):
    help = "Create or refresh the seed 000 demo agent, its model config (the shipped fake LLM) and tools."

    def add_arguments(self, parser):
        parser.add_argument(
            "--llm-base-url", default=os.environ.get("AGENTRY_DEMO_LLM_URL", "http://127.0.0.1:8901/v1")
        )
        parser.add_argument("--no-stream", action="store_true", help="Call the model without streaming.")

    def handle(self, *args, llm_base_url, no_stream, **options):
        agent = demo_seed(llm_base_url=llm_base_url, stream=not no_stream)
        self.stdout.write(
            self.style.SUCCESS(f"Demo agent ready: {agent.name} (slug {agent.slug}), model at {llm_base_url}")
        )
