"""Write `data/example.jsonl` and `data/example_rollouts.jsonl` for several environments.

Each example row is played twice through the real environment (`run_local`)
by a scripted policy: once with a right answer, once with a wrong one. The
recordings therefore hold the environment's own tool outputs and user turns,
and the script checks each recording scored the reward it was meant to (1.0 /
0.0) before writing it. Usage::

    python -m gym_serve.envs._scripted_recordings code_generation text_to_sql llm_judge_qa \
        math_with_tools grid_world simulated_user workplace
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from gym_serve.environment.registry import load_environment_class
from gym_serve.environment.runner import EnvRunner
from gym_serve.testing.recording import Example, call, message, record
from gym_serve.verifiers.llm_judge import build_judge_request


def row_for(env_cls: type | None, prompt: str, tools: bool, **fields: Any) -> dict[str, Any]:
    """An input row: the prompt, the environment's tool schemas when `tools`, and the task fields."""
    params: dict[str, Any] = {"input": [{"role": "user", "content": prompt}]}
    if tools:
        assert env_cls is not None
        params["tools"] = EnvRunner(env_cls()).describe().tools
    return {"responses_create_params": params, **fields}


def fence(lang: str, code: str) -> str:
    return f"```{lang}\n{code}\n```"


async def code_generation() -> None:
    P = "Write a Python solution. Put the code in one ```python block."
    items: list[Example] = []
    probs = [
        (
            "Write a function add(a, b) that returns the sum of a and b.",
            {"tests": ["assert add(1, 2) == 3", "assert add(-5, 5) == 0", "assert add(10, 32) == 42"]},
            "def add(a, b):\n    return a + b",
            "def add(a, b):\n    return a - b",
        ),
        (
            "Write a function is_prime(n) that returns True when n is a prime number.",
            {
                "tests": [
                    "assert is_prime(2)",
                    "assert is_prime(97)",
                    "assert not is_prime(1)",
                    "assert not is_prime(91)",
                ]
            },
            "def is_prime(n):\n    if n < 2:\n        return False\n    i = 2\n    while i * i <= n:\n        if n % i == 0:\n            return False\n        i += 1\n    return True",
            "def is_prime(n):\n    return n % 2 == 1",
        ),
        (
            "Write a function reverse_words(s) that reverses the order of the words in s.",
            {"tests": ["assert reverse_words('a b c') == 'c b a'", "assert reverse_words('hello') == 'hello'"]},
            "def reverse_words(s):\n    return ' '.join(reversed(s.split()))",
            "def reverse_words(s):\n    return s[::-1]",
        ),
        (
            "Read two integers from one line of stdin and print their product.",
            {"cases": [{"input": "3 4\n", "output": "12\n"}, {"input": "-2 8\n", "output": "-16\n"}]},
            "a, b = map(int, input().split())\nprint(a * b)",
            "a, b = map(int, input().split())\nprint(a + b)",
        ),
        (
            "Read n from stdin, then print FizzBuzz for 1..n, one per line.",
            {
                "cases": [
                    {"input": "5\n", "output": "1\n2\nFizz\n4\nBuzz\n"},
                    {
                        "input": "15\n",
                        "output": "\n".join(
                            "FizzBuzz" if i % 15 == 0 else "Fizz" if i % 3 == 0 else "Buzz" if i % 5 == 0 else str(i)
                            for i in range(1, 16)
                        )
                        + "\n",
                    },
                ]
            },
            "n = int(input())\nfor i in range(1, n + 1):\n    print('FizzBuzz' if i % 15 == 0 else 'Fizz' if i % 3 == 0 else 'Buzz' if i % 5 == 0 else i)",
            "n = int(input())\nfor i in range(1, n + 1):\n    print('Fizz' if i % 3 == 0 else 'Buzz' if i % 5 == 0 else i)",
        ),
        (
            "Read a line of integers from stdin and print their maximum.",
            {"cases": [{"input": "3 9 2\n", "output": "9\n"}, {"input": "-1 -7\n", "output": "-1\n"}]},
            "print(max(map(int, input().split())))",
            "import time\nwhile True:\n    pass",
        ),
    ]
    for i, (q, fields, good, bad) in enumerate(probs):
        row = row_for(None, f"{q}\n{P}", False, **fields)
        items.append(
            (
                row,
                [[message("Here is my solution:\n" + fence("python", good), f"c{i}a")]],
                [[message("Here is my solution:\n" + fence("python", bad), f"c{i}b")]],
            )
        )
    await record(load_environment_class("code_generation"), items)


async def text_to_sql() -> None:
    schema = (
        "Tables: customers(id, name, city); products(id, name, category, price); "
        "orders(id, customer_id, product_id, quantity, order_date)."
    )
    qs = [
        (
            "Which customers live in Berlin? Return their names.",
            "SELECT name FROM customers WHERE city = 'Berlin'",
            False,
            "SELECT name FROM customers WHERE city = 'Berlin' ORDER BY id DESC",
            "SELECT name FROM customers WHERE city = 'Paris'",
        ),
        (
            "List product names in the furniture category, cheapest first.",
            "SELECT name FROM products WHERE category = 'furniture' ORDER BY price",
            True,
            "SELECT p.name FROM products AS p WHERE p.category = 'furniture' ORDER BY p.price ASC",
            "SELECT name FROM products WHERE category = 'furniture' ORDER BY price DESC",
        ),
        (
            "How many orders were placed in March 2024?",
            "SELECT COUNT(*) FROM orders WHERE order_date LIKE '2024-03-%'",
            False,
            "SELECT COUNT(id) FROM orders WHERE order_date BETWEEN '2024-03-01' AND '2024-03-31'",
            "SELECT COUNT(*) FROM orders",
        ),
        (
            "What is the total revenue (price times quantity) per customer name?",
            "SELECT c.name, SUM(p.price * o.quantity) FROM orders o JOIN customers c ON c.id = o.customer_id JOIN products p ON p.id = o.product_id GROUP BY c.name",
            False,
            "SELECT customers.name, SUM(quantity * price) AS revenue FROM orders JOIN customers ON customers.id = customer_id JOIN products ON products.id = product_id GROUP BY customers.id",
            "SELECT c.name, SUM(o.quantity) FROM orders o JOIN customers c ON c.id = o.customer_id GROUP BY c.name",
        ),
        (
            "Which products were never ordered? Return their names.",
            "SELECT name FROM products WHERE id NOT IN (SELECT product_id FROM orders)",
            False,
            "SELECT p.name FROM products p LEFT JOIN orders o ON o.product_id = p.id WHERE o.id IS NULL",
            "SELECT name FROM products",
        ),
    ]
    items: list[Example] = []
    for i, (q, ref, ordered, good, bad) in enumerate(qs):
        row = row_for(
            None,
            f"{schema}\n{q}\nAnswer with one SQLite query in a ```sql block.",
            False,
            expected_sql=ref,
            ordered=ordered,
        )
        items.append((row, [[message(fence("sql", good), f"s{i}a")]], [[message(fence("sql", bad), f"s{i}b")]]))
    await record(load_environment_class("text_to_sql"), items)


async def llm_judge_qa() -> None:
    qs = [
        (
            "What is the capital of Australia?",
            "Canberra",
            "The capital of Australia is Canberra.",
            "Sydney is the capital.",
        ),
        (
            "Who wrote 'Pride and Prejudice'?",
            "Jane Austen",
            "It was written by Jane Austen.",
            "Charlotte Bronte wrote it.",
        ),
        (
            "What gas do plants absorb for photosynthesis?",
            "Carbon dioxide",
            "They take in CO2 (carbon dioxide).",
            "Oxygen.",
        ),
        ("How many sides does a hexagon have?", "6", "A hexagon has six sides.", "A hexagon has eight sides."),
        (
            "What is the boiling point of water at sea level in Celsius?",
            "100 degrees Celsius",
            "It boils at 100 °C.",
            "About 90 °C.",
        ),
    ]
    judge_rows = []
    items: list[Example] = []
    for i, (q, ref, good, bad) in enumerate(qs):
        row = row_for(None, q, False, question=q, expected_answer=ref)
        for ans, eq in ((good, True), (bad, False), ("I'm not sure.", False)):
            req = build_judge_request(q, ref, ans)
            verdict = "EQUIVALENT" if eq else "NOT_EQUIVALENT"
            reason = (
                "The candidate gives the same answer as the reference."
                if eq
                else "The candidate's answer differs from the reference."
            )
            judge_rows.append(
                {
                    "responses_create_params": req,
                    "response": {"output": [message(f"{reason}\nVERDICT: {verdict}", f"j{i}{int(eq)}")]},
                    "reward": 1.0,
                }
            )
        items.append((row, [[message(good, f"q{i}a")]], [[message(bad, f"q{i}b")]]))
    cls = load_environment_class("llm_judge_qa")
    (cls.data_dir() / "judge_recordings.jsonl").write_text("".join(json.dumps(r) + "\n" for r in judge_rows))
    await record(load_environment_class("llm_judge_qa"), items, {"judge_recordings": ["judge_recordings.jsonl"]})


async def math_with_tools() -> None:
    qs = [
        (
            "A shop sells 17 boxes of 23 apples and then 48 more apples. How many apples in total?",
            "439",
            ["print(17 * 23)", "print(391 + 48)"],
            "439",
            "429",
        ),
        (
            "What is the sum of the squares of the integers from 1 to 20?",
            "2870",
            ["print(sum(i * i for i in range(1, 21)))"],
            "2870",
            "2780",
        ),
        (
            "A loan of 1200 grows by 5% per year, compounded yearly. What is it worth after 3 years? Round to 2 decimals.",
            "1389.15",
            ["print(1200 * 1.05 ** 3)", "print(round(1200 * 1.05 ** 3, 2))"],
            "1389.15",
            "1380",
        ),
        (
            "How many primes are there below 100?",
            "25",
            ["print(len([n for n in range(2, 100) if all(n % d for d in range(2, int(n ** 0.5) + 1))]))"],
            "25",
            "24",
        ),
        (
            "What is 2 to the power 40, divided by 1024?",
            "1073741824",
            ["print(2 ** 40)", "print(1099511627776 // 1024)"],
            "1073741824",
            "1048576",
        ),
    ]
    items: list[Example] = []
    for i, (q, ans, codes, good, bad) in enumerate(qs):
        row = row_for(
            load_environment_class("math_with_tools"),
            q + " Use the python tool, then give the final answer as \\boxed{}.",
            True,
            expected_answer=ans,
        )

        def turns(final, tag, i=i, codes=codes):
            t = [[call("python", {"code": c}, f"call_m{i}{tag}{k}")] for k, c in enumerate(codes)]
            return t + [[message(f"The answer is \\boxed{{{final}}}.", f"m{i}{tag}")]]

        items.append((row, turns(good, "a"), turns(bad, "b")))
    await record(load_environment_class("math_with_tools"), items)


async def grid_world() -> None:
    grids = [
        (["S.G"], ["right", "right"], ["left", "left", "left"]),
        (["S#.", "..G"], ["down", "right", "right"], ["right", "right", "up"]),
        (["S..", "##.", "G.."], ["right", "right", "down", "down", "left", "left"], ["down", "down", "down"]),
        ([".S.", ".#.", ".G."], ["left", "down", "down", "right"], ["down", "down"]),
        (["S.#G", "...."], ["down", "right", "right", "right", "up"], ["right", "right", "right"]),
    ]
    items: list[Example] = []
    for i, (grid, good, bad) in enumerate(grids):
        prompt = (
            "You are the agent A on a grid (# walls, G goal). Each turn reply with one move: up, down, left or right.\n"
            + "\n".join(grid).replace("S", "A")
        )
        row = row_for(None, prompt, False, grid=grid, max_moves=len(bad) if len(bad) < len(good) else 12)
        row["max_moves"] = max(len(good), 3)
        items.append(
            (
                row,
                [[message(f"I move {m}.", f"g{i}a{k}")] for k, m in enumerate(good)],
                [[message(f"I move {m}.", f"g{i}b{k}")] for k, m in enumerate(bad)],
            )
        )
    await record(load_environment_class("grid_world"), items)


async def simulated_user() -> None:
    cases = [
        (
            "My package never arrived and I want my money back.",
            {"order": "The order number is A-1001.", "email": "My email is jo@example.com."},
            ["A-1001", "refund"],
            [
                "I'm sorry to hear that. What is your order number?",
                "Thanks. Which email is on the account?",
                "RESOLUTION: refund order A-1001 to jo@example.com",
            ],
            ["I'm sorry to hear that. What is your order number?", "RESOLUTION: replacement for order A-1001"],
        ),
        (
            "The headphones I got are broken, I'd like a replacement.",
            {"order": "It's order B-2002.", "model": "The model is QuietMax 3."},
            ["B-2002", "replacement"],
            [
                "Sorry about that! Could you share the order number?",
                "RESOLUTION: replacement for order B-2002 (QuietMax 3)",
            ],
            ["Sorry about that! Could you share the order number?", "RESOLUTION: refund order B-2020"],
        ),
        (
            "I was charged twice this month.",
            {"order": "Order C-3003.", "date": "Both charges were on May 3."},
            ["C-3003", "refund"],
            [
                "Let me check. What's the order number?",
                "And on what date did the charges appear?",
                "RESOLUTION: refund the duplicate charge on order C-3003",
            ],
            ["That's odd. Please wait a few days.", "RESOLUTION: no action needed"],
        ),
        (
            "I need to change my delivery address.",
            {"order": "The order is D-4004.", "address": "New address: 5 Elm St."},
            ["D-4004", "5 Elm St"],
            [
                "Sure. What's the order number?",
                "What's the new address?",
                "RESOLUTION: update address of D-4004 to 5 Elm St.",
            ],
            ["Sure. What's the order number?", "RESOLUTION: update address of D-4004"],
        ),
        (
            "My discount code didn't work at checkout.",
            {"code": "The code was SAVE20.", "order": "Order E-5005."},
            ["E-5005", "SAVE20", "credit"],
            [
                "Which code did you use, and what is the order number?",
                "RESOLUTION: credit the SAVE20 discount to order E-5005",
            ],
            ["Which code did you use?", "RESOLUTION: credit the discount"],
        ),
    ]
    items: list[Example] = []
    for i, (opening, facts, expected, good, bad) in enumerate(cases):
        row = row_for(None, opening, False, persona={"facts": facts}, expected=expected, max_turns=6)
        row["responses_create_params"]["instructions"] = (
            "You are a support agent. Ask the customer for what you need, "
            "then end with a line `RESOLUTION: <action and order id>`."
        )
        items.append(
            (
                row,
                [[message(t, f"u{i}a{k}")] for k, t in enumerate(good)],
                [[message(t, f"u{i}b{k}")] for k, t in enumerate(bad)],
            )
        )
    await record(load_environment_class("simulated_user"), items)


async def workplace() -> None:
    W = load_environment_class("workplace")
    cases = [
        (
            "Close ticket T-2; the printer is fixed.",
            {"tickets": {"T-2": {"status": "closed"}}},
            [
                [call("list_tickets", {"status": "open"}, "w0a1")],
                [call("set_ticket_status", {"ticket_id": "T-2", "status": "closed"}, "w0a2")],
                [message("T-2 is closed.", "w0a")],
            ],
            [[call("set_ticket_status", {"ticket_id": "T-4", "status": "closed"}, "w0b1")], [message("Done.", "w0b")]],
        ),
        (
            "Assign the printer ticket to someone from facilities and mark it in progress.",
            {"tickets": {"T-2": {"assignee": "omar", "status": "in_progress"}}},
            [
                [call("find_employees", {"team": "facilities"}, "w1a1")],
                [
                    call("assign_ticket", {"ticket_id": "T-2", "assignee": "omar"}, "w1a2"),
                    call("set_ticket_status", {"ticket_id": "T-2", "status": "in_progress"}, "w1a3"),
                ],
                [message("Omar has the printer ticket now.", "w1a")],
            ],
            [
                [call("assign_ticket", {"ticket_id": "T-2", "assignee": "dana"}, "w1b1")],
                [message("Assigned to Dana.", "w1b")],
            ],
        ),
        (
            "Reassign T-1 to lee and email lee about it.",
            {"tickets": {"T-1": {"assignee": "lee"}}, "emails": [{"to": "lee@example.com", "contains": "T-1"}]},
            [
                [call("assign_ticket", {"ticket_id": "T-1", "assignee": "lee"}, "w2a1")],
                [call("find_employees", {"team": "it"}, "w2a2")],
                [
                    call(
                        "send_email",
                        {
                            "to": "lee@example.com",
                            "subject": "T-1 is yours",
                            "body": "Please take over the VPN ticket T-1.",
                        },
                        "w2a3",
                    )
                ],
                [message("Reassigned and emailed.", "w2a")],
            ],
            [
                [call("assign_ticket", {"ticket_id": "T-1", "assignee": "lee"}, "w2b1")],
                [message("Reassigned.", "w2b")],
            ],
        ),
        (
            "Email rita (finance) that the expense policy ticket T-4 is closed, and close it.",
            {"tickets": {"T-4": {"status": "closed"}}, "emails": [{"to": "rita@example.com", "contains": "T-4"}]},
            [
                [
                    call("set_ticket_status", {"ticket_id": "T-4", "status": "closed"}, "w3a1"),
                    call(
                        "send_email",
                        {
                            "to": "rita@example.com",
                            "subject": "T-4 closed",
                            "body": "The expense policy page is updated.",
                        },
                        "w3a2",
                    ),
                ],
                [message("Closed T-4 and told Rita.", "w3a")],
            ],
            [
                [call("send_email", {"to": "rita@example.com", "subject": "T-4 closed", "body": "Done."}, "w3b1")],
                [message("Told Rita.", "w3b")],
            ],
        ),
        (
            "Reopen the password reset ticket for Kim.",
            {"tickets": {"T-5": {"status": "open"}}},
            [
                [call("list_tickets", {"status": "closed"}, "w4a1")],
                [call("set_ticket_status", {"ticket_id": "T-5", "status": "open"}, "w4a2")],
                [message("T-5 is open again.", "w4a")],
            ],
            [
                [call("list_tickets", {}, "w4b1")],
                [
                    call("set_ticket_status", {"ticket_id": "T-5", "status": "open"}, "w4b2"),
                    call("set_ticket_status", {"ticket_id": "T-3", "status": "open"}, "w4b3"),
                ],
                [message("Reopened.", "w4b")],
            ],
        ),
    ]
    items = [(row_for(W, q, True, goal=goal), good, bad) for q, goal, good, bad in cases]
    await record(load_environment_class("workplace"), items)


async def main(names: list[str]) -> None:
    for name in names:
        await globals()[name]()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
