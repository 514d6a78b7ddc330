"""Bases and documents for the knowledge tests."""

import zlib
from pathlib import Path

from knowledge.models import Document, KnowledgeBase
from knowledge.services import base_index, knowledge_base_save
from tests.support.factories import ModelConfigFactory

FAQ = Path(__file__).resolve().parents[2] / "knowledge" / "fixtures" / "faq"


def make_base(*, embeddings_at: str | None = None, **fields) -> KnowledgeBase:
    """A base; with `embeddings_at` (an API base URL) it embeds through that endpoint."""
    if embeddings_at is not None:
        fields["embedding_model"] = ModelConfigFactory(
            base_url=embeddings_at, model="fake-embedding", price_input_per_million="2.0"
        )
    fields.setdefault("name", "FAQ")
    fields.setdefault("fallback_answer", "抱歉，我没有找到答案，请联系人工客服。")
    return knowledge_base_save(base=KnowledgeBase(**fields))


def add_documents(base: KnowledgeBase, *names: str, tags=()) -> list[Document]:
    """The named FAQ files as documents of the base, indexed here (as the worker would)."""
    documents = [
        Document.objects.create(base=base, title=name, text=(FAQ / name).read_text(encoding="utf-8"), tags=list(tags))
        for name in names
    ]
    base_index(base_id=base.pk, document_ids=[d.pk for d in documents])
    return documents


def pdf_with_stream(stream: bytes, *, deflate: bool = False) -> bytes:
    """A one-page PDF whose page content is `stream` (FlateDecode-compressed when `deflate`),
    built by hand: no PDF writer needed, and any content, however hostile, can be written."""
    if deflate:
        stream = zlib.compress(stream, 9)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d%s >>\nstream\n" % (len(stream), b" /Filter /FlateDecode" if deflate else b"")
        + stream
        + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for i, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def minimal_pdf(text: str) -> bytes:
    """A one-page PDF whose text layer is `text` (ASCII)."""
    return pdf_with_stream(f"BT /F1 12 Tf 72 712 Td ({text}) Tj ET".encode())


def slow_pdf() -> bytes:
    """10.8 KB that cost half a minute of CPU to read: one content stream of a million text
    operators (`(a) Tj`), compressed."""
    return pdf_with_stream(b"BT /F1 12 Tf " + b"(a) Tj " * 1_000_000 + b"ET", deflate=True)


def bomb_pdf(inflated_bytes: int = 80_000_000) -> bytes:
    """A decompression bomb: 78 KB whose one stream inflates to `inflated_bytes` (80 MB)."""
    return pdf_with_stream(b" " * inflated_bytes, deflate=True)


def search_script(tool: str, query: str, **arguments) -> dict:
    """A fake model that searches once, then cites the first passage or answers the fallback."""
    return {
        "scenarios": [
            {
                "match": ".",
                "steps": [
                    {"tool_calls": [{"name": tool, "arguments": {"query": query, **arguments}}]},
                    {
                        "branches": [
                            {
                                "if_last_tool_result_matches": r"\n\[(?P<cid>C\d+)\] ",
                                "then": {"content": "七天内可以无理由退货 [{cid}]"},
                            },
                            {
                                "if_last_tool_result_matches": r"nothing else:\n(?P<fallback>.+)",
                                "then": {"content": "{fallback}"},
                            },
                        ],
                        "else": {"content": "unexpected tool result"},
                    },
                ],
            }
        ]
    }
