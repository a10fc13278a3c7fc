"""Text-to-SQL: result sets decide the reward; the database stays read-only; recordings replay right and wrong."""

from __future__ import annotations

import hashlib

import pytest

from gym_serve.verifiers.sql import compare_queries

from . import TextToSql, extract_sql

ENV, CONFIG = TextToSql, None
DB = TextToSql.data_dir() / "shop.db"


async def test_order_matters_only_when_the_task_says_so() -> None:
    asc, desc = "SELECT name FROM products ORDER BY price", "SELECT name FROM products ORDER BY price DESC"
    assert (await compare_queries(DB, desc, asc)).reward == 1.0
    assert (await compare_queries(DB, desc, asc, ordered=True)).reward == 0.0
    # Duplicates count: a multiset, not a set.
    assert (
        await compare_queries(DB, "SELECT city FROM customers", "SELECT DISTINCT city FROM customers")
    ).reward == 0.0


async def test_writes_and_attach_are_refused_and_the_file_is_unchanged() -> None:
    before = hashlib.sha256(DB.read_bytes()).hexdigest()
    for attack in (
        "DELETE FROM orders",
        "DROP TABLE customers",
        "ATTACH DATABASE '/tmp/x.db' AS x",
        "UPDATE products SET price = 0",
    ):
        result = await compare_queries(DB, attack, "SELECT 1")
        assert result.reward == 0.0 and result.error, attack
    assert hashlib.sha256(DB.read_bytes()).hexdigest() == before


async def test_a_runaway_query_times_out() -> None:
    endless = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT COUNT(*) FROM n"
    result = await compare_queries(DB, endless, "SELECT 1", timeout_s=0.5)
    assert result.reward == 0.0 and "TimeoutError" in result.error


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("SELECT zeroblob(1000000000)", "string or blob too big"),  # a gigabyte in one value
        ("SELECT length(replace(hex(zeroblob(400000)), '0', 'ab'))", "string or blob too big"),
        (  # a hundred 1 MB rows at a time, for two million rows: gigabytes before the deadline was looked at
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n LIMIT 2000000) "
            "SELECT randomblob(999999) FROM n",
            "more than 64000000 bytes",
        ),
    ],
)
async def test_a_query_that_would_fill_the_memory_scores_0_not_a_masked_row(query: str, says: str) -> None:
    """The model wrote the query: the verifier running out of memory (or time) on it is its 0, not a failure."""
    from . import SqlTask

    verdict = await ENV().verify(SqlTask(expected_sql="SELECT 1"), _answer(f"```sql\n{query}\n```"))
    assert verdict.reward == 0.0 and says in verdict.fields["sql_error"]


def test_the_query_is_the_last_sql_fence() -> None:
    assert extract_sql("first ```sql\nSELECT 1;\n``` then ```sql\nSELECT 2;\n```") == "SELECT 2"
    assert extract_sql("SELECT name FROM customers;") == "SELECT name FROM customers"


async def test_a_database_outside_the_env_is_refused() -> None:
    from . import SqlTask

    with pytest.raises(ValueError, match="database"):
        await ENV().verify(
            SqlTask(expected_sql="SELECT 1", database="../../../etc/passwd"), _answer("```sql\nSELECT 1\n```")
        )


def _answer(text: str):
    from gym_serve import Response

    return Response.model_validate(
        {"output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}]}
    )
