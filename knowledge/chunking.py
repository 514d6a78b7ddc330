"""Cut a document's text into chunks of at most `size` characters.

Paragraphs are kept whole when they fit; a longer one is cut at sentence ends (Chinese 。！？
and English . ! ? followed by a space), and only a sentence longer than a chunk is cut inside.
Consecutive chunks share about `overlap` characters, taken as whole sentences where possible,
so an answer that straddles a boundary is still found in one chunk.
"""

import re

_PARAGRAPHS = re.compile(r"\n\s*\n")
# After a Chinese end mark (a closing quote stays with it), or an English one before whitespace.
_SENTENCES = re.compile(r"(?<=[。！？；])(?![”’」』）)])|(?<=[.!?;])\s+|\n")


def _sentences(paragraph: str, size: int) -> list[str]:
    parts = [part.strip() for part in _SENTENCES.split(paragraph) if part and part.strip()]
    pieces = []
    for part in parts:
        pieces.extend(part[i : i + size] for i in range(0, len(part), size))
    return pieces


def _joiner(left: str, right: str) -> str:
    # No space between two CJK pieces; a space between words.
    return "" if (left and ord(left[-1]) > 0x2E7F) or (right and ord(right[0]) > 0x2E7F) else " "


def _tail(pieces: list[tuple[str, bool]], overlap: int) -> list[tuple[str, bool]]:
    """The last sentences of a chunk, up to `overlap` characters, to start the next one with."""
    tail, length = [], 0
    for piece in reversed(pieces):
        if length + len(piece[0]) > overlap:
            break
        tail.insert(0, piece)
        length += len(piece[0]) + 1
    return tail


def _join(pieces: list[tuple[str, bool]]) -> str:
    """Pieces are (text, starts a paragraph): paragraphs are kept on lines of their own."""
    text = pieces[0][0]
    for piece, starts_paragraph in pieces[1:]:
        text += ("\n" if starts_paragraph else _joiner(text, piece)) + piece
    return text


def chunk_text(text: str, *, size: int, overlap: int) -> list[str]:
    chunks: list[str] = []
    current: list[tuple[str, bool]] = []
    for paragraph in _PARAGRAPHS.split(text.strip()):
        paragraph = paragraph.strip()
        if not paragraph:
            continue
        # A paragraph that fits stays one piece; a new chunk starts at a paragraph when it can.
        pieces = [paragraph] if len(paragraph) <= size else _sentences(paragraph, size)
        for i, text in enumerate(pieces):
            piece = (text, i == 0)
            if current and len(_join([*current, piece])) > size:
                chunks.append(_join(current))
                current = _tail(current, overlap)
                while current and len(_join([*current, piece])) > size:
                    current.pop(0)
            current.append(piece)
    if current:
        chunks.append(_join(current))
    return chunks


def chunk_rows(header: str, rows: list[str], *, size: int) -> list[str]:
    """A table's rows in chunks of at most `size` characters, each starting with the header row,
    so a row read alone still says what its columns are; a row longer than a chunk is cut."""
    chunks: list[str] = []
    current = header
    room = max(size - len(header) - 1, size // 2)
    for row in rows:
        for piece in (row[i : i + room] for i in range(0, len(row), room)) if row else ():
            if current != header and len(current) + 1 + len(piece) > size:
                chunks.append(current)
                current = header
            current = f"{current}\n{piece}" if current else piece
    if current != header or not chunks:
        chunks.append(current)
    return [chunk for chunk in chunks if chunk.strip()]


def chunk_sections(sections, *, size: int, overlap: int) -> list[tuple[dict, str]]:
    """(location, text) of each chunk, cut section by section (knowledge.sections): a chunk never
    straddles two pages, slides or sheet regions, so its location is one."""
    chunks = []
    for section in sections:
        if section.header:
            pieces = chunk_rows(section.header, section.text.split("\n"), size=size)
        else:
            pieces = chunk_text(section.text, size=size, overlap=overlap)
        chunks.extend((section.location, piece) for piece in pieces)
    return chunks
