"""bench.knowledge_sql's tsquery text: a question's terms can never change the query's syntax."""

import pytest

from bench.knowledge_sql import tsquery_lexeme, tsquery_text


def _unquote(lexeme: str) -> str:
    """The term a quoted tsquery operand stands for, read as PostgreSQL's tsquery parser reads it."""
    assert lexeme[0] == "'" and lexeme[-1] == "'"
    term, body, i = [], lexeme[1:-1], 0
    while i < len(body):
        char = body[i]
        if char == "\\":
            term.append(body[i + 1])
            i += 2
        elif char == "'":
            assert body[i + 1] == "'", "a lone quote would end the operand"
            term.append("'")
            i += 2
        else:
            term.append(char)
            i += 1
    return "".join(term)


@pytest.mark.parametrize("term", ["can't", "a:b", "x&y", "x|y", "!not", "back\\slash", "(open", "'", "\\", "退货"])
def test_a_term_is_one_quoted_operand_that_reads_back_as_itself(term):
    assert _unquote(tsquery_lexeme(term)) == term


def test_a_quote_and_a_backslash_are_escaped_so_the_operand_does_not_end_early():
    assert tsquery_lexeme("it's") == "'it''s'"
    assert tsquery_lexeme("a\\") == "'a\\\\'"
    assert tsquery_lexeme("a\\'") == "'a\\\\'''"


def test_terms_are_or_ed_once_each_in_first_seen_order():
    assert tsquery_text(["退货", "order", "退货", "a:b"]) == "'退货' | 'order' | 'a:b'"


def test_operators_inside_terms_stay_inside_their_quotes():
    text = tsquery_text(["&", "|", "!", "(", ")", ":*"])
    assert text == "'&' | '|' | '!' | '(' | ')' | ':*'"
    assert [_unquote(operand) for operand in text.split(" | ")] == ["&", "|", "!", "(", ")", ":*"]


def test_no_terms_or_empty_terms_give_no_query():
    assert tsquery_text([]) == ""
    assert tsquery_text(["", ""]) == ""
