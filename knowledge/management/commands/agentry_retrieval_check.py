from django.core.management.base import BaseCommand, CommandError
from django.utils.translation import gettext as _

from agents.models import ModelConfig
from fakellm.testing import serve_in_thread
from knowledge.evaluation import faq_questions, format_check, retrieval_check
from workspaces.cli import NAMES_HELP, workspace_id_or_first

# The methods' names as the format table's columns.
_SHORT = {
    "keyword: jieba + BM25": "jieba",
    "keyword: trigram + BM25": "trigram",
    "vector": "vector",
    "combined (RRF): jieba + vector": "RRF jieba+vector",
    "combined (RRF): trigram + vector": "RRF trigram+vector",
}


class Command(BaseCommand):
    help = _(
        "Measure retrieval on the shipped bilingual FAQ: hit@1, hit@3 and MRR for keyword (jieba, trigram), "
        "vector and combined search; then hit@3 per file format (Word, Excel, PowerPoint, CSV, scanned images "
        "and PDFs read by OCR). Vectors come from the fake LLM server's deterministic embeddings unless a "
        "model config is named."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--embedding-model-config", help=_("Name of the ModelConfig of a real /embeddings endpoint.")
        )
        parser.add_argument("--no-vectors", action="store_true", help=_("Keyword search only."))
        parser.add_argument(
            "--no-formats",
            action="store_true",
            help=_("Skip the office files and scans (their OCR takes a few seconds of CPU)."),
        )
        parser.add_argument("--workspace", help=NAMES_HELP)

    def handle(self, *args, **options):
        stop = None
        name = options.get("embedding_model_config")
        if options["no_vectors"]:
            config = None
        elif name:
            workspace_id = workspace_id_or_first(options["workspace"])
            config = ModelConfig.objects.filter(workspace_id=workspace_id, name=name).first()
            if config is None:
                raise CommandError(_("No model config is named %(name)s.") % {"name": name})
        else:
            base_url, stop = serve_in_thread()
            # Unsaved: retrieval_check saves it inside the transaction it rolls back.
            config = ModelConfig(
                name="fake-embeddings (retrieval check)", base_url=f"{base_url}/v1", model="fake-embedding"
            )
        try:
            scores = retrieval_check(embedding_model=config)
            formats = [] if options["no_formats"] else format_check(embedding_model=config)
        finally:
            if stop is not None:
                stop()
        self.stdout.write(_("%(n)s questions") % {"n": len(faq_questions())})
        self.stdout.write(f"{'method':36} {'hit@1':>6} {'hit@3':>6} {'MRR':>6}")
        for score in scores:
            self.stdout.write(f"{score.name:36} {score.hit1:6.2f} {score.hit3:6.2f} {score.mrr:6.3f}")
        if formats:
            names = list(formats[0].hit3)
            self.stdout.write("")
            self.stdout.write(_("hit@3 per file format (the office files and scans, with the FAQ in the same base):"))
            self.stdout.write(f"{'format':12} {'questions':>9}  " + "  ".join(_SHORT[name] for name in names))
            for score in formats:
                cells = "  ".join(f"{score.hit3[name]:>{len(_SHORT[name])}.2f}" for name in names)
                self.stdout.write(f"{score.format:12} {score.questions:9}  {cells}")
