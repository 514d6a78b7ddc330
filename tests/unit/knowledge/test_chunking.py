from knowledge.chunking import chunk_text


def test_short_text_is_one_chunk():
    assert chunk_text("一句话。Another sentence.", size=100, overlap=10) == ["一句话。Another sentence."]


def test_chunks_respect_the_size_and_cut_at_chinese_sentence_ends():
    text = "退货需要在七天内申请。" * 3 + "运费由买家承担！" * 3 + "发票会发到邮箱吗？" * 3
    chunks = chunk_text(text, size=40, overlap=0)
    assert all(len(chunk) <= 40 for chunk in chunks)
    assert len(chunks) > 1
    # Every chunk ends at a sentence end, none cuts a sentence in half.
    assert all(chunk[-1] in "。！？" for chunk in chunks)
    assert "".join(chunks) == text


def test_english_is_cut_at_sentence_ends_and_overlaps():
    sentences = [f"Sentence number {i} is here." for i in range(12)]
    chunks = chunk_text(" ".join(sentences), size=80, overlap=30)
    assert all(len(chunk) <= 80 for chunk in chunks)
    assert all(chunk.endswith(".") for chunk in chunks)
    # The next chunk starts with the last sentence of the one before it.
    for before, after in zip(chunks, chunks[1:], strict=False):
        assert after.startswith(before.split(". ")[-1].rstrip("."))
    assert all(sentence in " ".join(chunks) for sentence in sentences)


def test_paragraphs_start_new_chunks_when_they_do_not_fit():
    first, second = "A" * 50 + ".", "B" * 50 + "."
    assert chunk_text(f"{first}\n\n{second}", size=60, overlap=0) == [first, second]


def test_a_sentence_longer_than_a_chunk_is_cut_inside():
    chunks = chunk_text("长" * 130, size=60, overlap=10)
    assert [len(c) for c in chunks] == [60, 60, 10]


def test_empty_text_has_no_chunks():
    assert chunk_text(" \n\n ", size=60, overlap=10) == []
