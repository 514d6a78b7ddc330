"""What the worker reads from a file's bytes, and the cheap check the upload form makes."""

import pytest

from knowledge.extract import (
    HTML,
    MARKDOWN,
    PDF,
    TEXT,
    ExtractionFailed,
    file_kind,
    markdown_title,
    sections_from_bytes,
)
from knowledge.sections import Section


@pytest.mark.parametrize(
    ("text", "title"),
    [
        ("# 退货政策\n\n七天无理由退货。", "退货政策"),
        ("intro\n\n## Section\n\n# Returns #\n", "Returns"),
        ("```bash\n# install it\n```\n# Shipping\n", "Shipping"),
        ("#hashtag, not a heading\n\nbody", ""),
        ("## Only a second-level heading", ""),
        ("", ""),
    ],
)
def test_a_markdown_title_is_its_first_level_one_heading(text, title):
    assert markdown_title(text) == title


def test_a_markdown_file_is_titled_by_its_heading_and_a_text_file_is_not():
    text = "# 退货政策\n\n七天无理由退货。".encode()
    assert sections_from_bytes(text, filename="returns.md") == ("退货政策", [Section("# 退货政策\n\n七天无理由退货。")])
    assert sections_from_bytes(text, filename="returns.txt")[0] == ""


@pytest.mark.parametrize(
    ("filename", "content_type", "head", "kind"),
    [
        ("a.PDF", "", b"", PDF),
        ("upload", "application/octet-stream", b"%PDF-1.7", PDF),
        ("a.htm", "", b"", HTML),
        ("page", "application/xhtml+xml; charset=utf-8", b"", HTML),
        ("a.markdown", "", b"", MARKDOWN),
        ("notes", "text/markdown", b"", MARKDOWN),
        ("a.txt", "", b"", TEXT),
        ("README", "", b"", TEXT),
    ],
)
def test_the_kind_is_read_from_the_name_the_type_or_the_first_bytes(filename, content_type, head, kind):
    assert file_kind(filename=filename, content_type=content_type, head=head) == kind


def test_other_kinds_are_refused():
    with pytest.raises(ExtractionFailed, match="Upload text, Markdown, HTML, CSV, PDF, Word"):
        file_kind(filename="a.exe", content_type="application/octet-stream", head=b"MZ\x90\x00")
