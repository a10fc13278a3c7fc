"""Build `shop.db`, the small SQLite database the text_to_sql examples query.

Run `python envs/text_to_sql/data/make_db.py` to rebuild it (deterministic:
the same rows every time).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

SCHEMA = """
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT NOT NULL);
CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT NOT NULL, category TEXT NOT NULL, price REAL NOT NULL);
CREATE TABLE orders (
    id INTEGER PRIMARY KEY,
    customer_id INTEGER NOT NULL REFERENCES customers(id),
    product_id INTEGER NOT NULL REFERENCES products(id),
    quantity INTEGER NOT NULL,
    order_date TEXT NOT NULL
);
"""
CUSTOMERS = [
    (1, "Alice", "Berlin"),
    (2, "Bob", "Paris"),
    (3, "Carla", "Berlin"),
    (4, "Dan", "Madrid"),
    (5, "Eve", "Paris"),
]
PRODUCTS = [
    (1, "Laptop", "electronics", 999.0),
    (2, "Phone", "electronics", 599.0),
    (3, "Desk", "furniture", 250.0),
    (4, "Chair", "furniture", 120.0),
    (5, "Pen", "office", 1.5),
    (6, "Notebook", "office", 3.25),
]
ORDERS = [
    (1, 1, 1, 1, "2024-01-05"),
    (2, 1, 5, 10, "2024-01-06"),
    (3, 2, 2, 1, "2024-02-11"),
    (4, 3, 3, 1, "2024-02-15"),
    (5, 3, 4, 4, "2024-02-15"),
    (6, 4, 6, 20, "2024-03-01"),
    (7, 5, 2, 2, "2024-03-09"),
    (8, 5, 5, 5, "2024-03-10"),
    (9, 2, 4, 2, "2024-03-12"),
]


def build(path: Path) -> None:
    path.unlink(missing_ok=True)
    with sqlite3.connect(path) as conn:
        conn.executescript(SCHEMA)
        conn.executemany("INSERT INTO customers VALUES (?, ?, ?)", CUSTOMERS)
        conn.executemany("INSERT INTO products VALUES (?, ?, ?, ?)", PRODUCTS)
        conn.executemany("INSERT INTO orders VALUES (?, ?, ?, ?, ?)", ORDERS)
    conn.close()


if __name__ == "__main__":
    build(Path(__file__).with_name("shop.db"))
