"""Text-to-SQL: answer a question with one SQLite query; the reward compares result sets.

Rows carry `expected_sql` (the reference query), optional `ordered` (the
question asks for an order, so row order counts) and `database` (a file in
this env's `data/`, default `shop.db`). The model's query is the last
```sql fenced block of its answer (or the whole answer when it has no fence).
Both queries run on the database opened read-only, with a timeout, off the
event loop (`gym_serve.verifiers.sql`).

Reward: 1.0 when the model's query returns the reference's rows, else 0.0;
`extracted_sql` and `sql_error` are added to the rollout row.
"""

from __future__ import annotations

import re

from gym_serve import Environment, Response, Task, Verdict
from gym_serve.verifiers.sql import compare_queries


class SqlTask(Task):
    expected_sql: str
    """The reference query; its result set is the answer."""
    ordered: bool = False
    """Whether row order matters (the question asks for a sorted result)."""
    database: str = "shop.db"
    """A SQLite file in this environment's `data/` folder."""


def extract_sql(text: str) -> str | None:
    blocks = re.findall(r"```(?:sql|sqlite)?[ \t]*\n(.*?)```", text, re.S | re.I)
    query = (blocks[-1] if blocks else text).strip().rstrip(";").strip()
    return query or None


class TextToSql(Environment[SqlTask, None]):
    async def verify(self, task: SqlTask, response: Response) -> Verdict:
        query = extract_sql(response.output_text())
        if query is None:
            return Verdict(reward=0.0, fields={"extracted_sql": None, "sql_error": "no query in the answer"})
        database = self.data_dir() / task.database
        if database.parent != self.data_dir() or not database.is_file():
            raise ValueError(f"`database` must name a file in {self.data_dir()}, got {task.database!r}")
        result = await compare_queries(database, query, task.expected_sql, ordered=task.ordered)
        return Verdict(reward=result.reward, fields={"extracted_sql": query, "sql_error": result.error})
