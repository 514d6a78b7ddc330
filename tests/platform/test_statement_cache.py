"""psycopg keeps the parsed form of the ledger's longer statements too
(platform_site.postgresql.base: STATEMENT_CACHE_PARAMS, STATEMENT_CACHE_LENGTH)."""

import pytest
from django.db import connection
from psycopg import _queries as psycopg_queries

pytestmark = [
    pytest.mark.skipif(connection.vendor != "postgresql", reason="psycopg's statement cache"),
    pytest.mark.django_db,
]


def _execute(params: int, padding: int = 0) -> list:
    # A statement of `params` placeholders whose text is also made longer by `padding` spaces.
    sql = "SELECT " + ", ".join(["%s::int"] * params) + " " * padding
    with connection.cursor() as cursor:
        cursor.execute(sql, list(range(params)))
        return list(cursor.fetchone())


@pytest.mark.parametrize(("params", "padding"), [(66, 0), (200, 0), (10, 9000)])
def test_a_statement_over_psycopg_s_own_limits_is_parsed_once(params, padding):
    assert params > 50 or padding > 4096  # over the limits psycopg ships with
    _execute(params, padding)
    hits = psycopg_queries._query2pg.cache_info().hits
    assert _execute(params, padding) == list(range(params))
    assert psycopg_queries._query2pg.cache_info().hits == hits + 1


def test_a_statement_over_the_raised_limits_is_still_parsed_each_time():
    _execute(300)
    hits = psycopg_queries._query2pg.cache_info().hits
    assert _execute(300) == list(range(300))
    assert psycopg_queries._query2pg.cache_info().hits == hits
