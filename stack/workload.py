#!/usr/bin/env python3
"""Demo workload: inserts, updates and deletes on the demo source at a chosen rate.

    python stack/workload.py --seed-customers 200 --seed-orders 1000   # load the schema + seed rows
    python stack/workload.py --rate 20 --duration 60                   # ~20 transactions/s for 60 s

Each transaction is one realistic business step (new customer, new order with items, payment,
shipment, cancellation with deletion of its items, profile edit), so the change stream carries
inserts, updates and deletes across all three tables, composite keys included.
"""
from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import time
from decimal import Decimal
from pathlib import Path

import psycopg2

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "stack"))
import stackctl  # noqa: E402

FIRST = ["Zoë", "José", "Ångström", "Łukasz", "Søren", "Mia", "Kenji", "Ana", "Émile", "Ngozi", "李", "Ольга"]
LAST = ["Müller", "García", "Dvořák", "Øster", "O'Brien", "Nakamura", "Silva", "Kowalski", "王", "Иванова"]
COUNTRIES = ["DE", "ES", "CZ", "DK", "IE", "JP", "BR", "PL", "CN", "FR", None]
SKUS = [f"SKU-{n:05d}" for n in range(1, 400)]


def connect(dsn: str | None):
    return psycopg2.connect(dsn or stackctl.pg_url(stackctl.DATABASES["source"]))


def load_schema(conn) -> None:
    with conn, conn.cursor() as cur:
        cur.execute((ROOT / "sql" / "demo" / "source_schema.sql").read_text())


class Workload:
    def __init__(self, conn, rng: random.Random):
        self.conn, self.rng = conn, rng
        self.counts = {"insert": 0, "update": 0, "delete": 0, "transactions": 0}

    def _one(self, sql: str, args=()):
        with self.conn.cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchone() if cur.description else None

    def _count(self, kind: str, n: int = 1) -> None:
        self.counts[kind] += n

    def new_customer(self) -> int:
        r = self.rng
        name = f"{r.choice(FIRST)} {r.choice(LAST)}"
        profile = None if r.random() < 0.2 else {"newsletter": r.random() < 0.5, "note": "größer ≥ 10 €",
                                                  "sizes": [r.randint(36, 46) for _ in range(r.randint(0, 3))]}
        row = self._one(
            "INSERT INTO customers (email, full_name, country, tags, profile) VALUES (%s, %s, %s, %s, %s) RETURNING id",
            (f"user{r.getrandbits(48):x}@example.com", name, r.choice(COUNTRIES),
             None if r.random() < 0.3 else r.sample(["vip", "b2b", "new", "returning"], r.randint(1, 2)),
             json.dumps(profile) if profile is not None else None))
        self._count("insert")
        return row[0]

    def random_id(self, table: str) -> int | None:
        row = self._one(f"SELECT id FROM {table} WHERE id >= (SELECT floor(random() * (max(id) + 1)) FROM {table}) "
                        f"ORDER BY id LIMIT 1")
        return row[0] if row else None

    def new_order(self) -> None:
        r = self.rng
        customer = self.random_id("customers") or self.new_customer()
        order_id = self._one("INSERT INTO orders (customer_id, status, note, delivery_on) "
                             "VALUES (%s, 'new', %s, current_date + %s) RETURNING id",
                             (customer, None if r.random() < 0.6 else "Bitte klingeln — 2. OG",
                              r.randint(1, 14)))[0]
        total = Decimal("0")
        lines = r.randint(1, 5)
        for line in range(1, lines + 1):
            qty, price = r.randint(1, 4), Decimal(r.randint(99, 99999)) / 100
            total += qty * price
            self._one("INSERT INTO order_items (order_id, line_no, sku, quantity, unit_price, discount, gift_wrap, "
                      "thumbnail) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                      (order_id, line, r.choice(SKUS), qty, price,
                       None if r.random() < 0.7 else Decimal(r.randint(1, 3000)) / 10000,
                       r.random() < 0.1, None if r.random() < 0.8 else psycopg2.Binary(r.randbytes(64))))
        self._one("UPDATE orders SET total = %s, updated_at = now() WHERE id = %s", (total, order_id))
        self._count("insert", 1 + lines)
        self._count("update")

    def advance_order(self) -> None:
        order_id = self.random_id("orders")
        if order_id is None:
            return self.new_order()
        self._one("UPDATE orders SET status = CASE status WHEN 'new' THEN 'paid' WHEN 'paid' THEN 'shipped' "
                  "ELSE status END, updated_at = now() WHERE id = %s", (order_id,))
        self._count("update")

    def cancel_order(self) -> None:
        order_id = self.random_id("orders")
        if order_id is None:
            return
        deleted = self._one("WITH d AS (DELETE FROM order_items WHERE order_id = %s RETURNING 1) "
                            "SELECT count(*) FROM d", (order_id,))[0]
        self._one("UPDATE orders SET status = 'cancelled', total = 0, updated_at = now() WHERE id = %s", (order_id,))
        self._count("delete", deleted)
        self._count("update")

    def edit_customer(self) -> None:
        cid = self.random_id("customers")
        if cid is None:
            return self.new_customer() and None
        self._one("UPDATE customers SET profile = coalesce(profile, '{}'::jsonb) || jsonb_build_object('seen', now()),"
                  " updated_at = now() WHERE id = %s", (cid,))
        self._count("update")

    def delete_customer(self) -> None:
        """Removes a customer with no orders (keeps FKs valid)."""
        row = self._one("DELETE FROM customers WHERE id = (SELECT c.id FROM customers c WHERE NOT EXISTS "
                        "(SELECT 1 FROM orders o WHERE o.customer_id = c.id) ORDER BY random() LIMIT 1) RETURNING id")
        if row:
            self._count("delete")

    def audit(self, action: str) -> None:
        """Every business step leaves an audit row (a batch-mode table); some get reviewed later."""
        self._one("INSERT INTO audit_log (actor, action, payload) VALUES (%s, %s, %s)",
                  (self.rng.choice(FIRST), action, json.dumps({"step": self.counts["transactions"]})))
        self._count("insert")
        if self.rng.random() < 0.2:
            self._one("UPDATE audit_log SET reviewed = true, updated_at = now() WHERE id = "
                      "(SELECT id FROM audit_log WHERE NOT reviewed ORDER BY id LIMIT 1)")
            self._count("update")

    def step(self) -> None:
        action = self.rng.choices(
            [self.new_customer, self.new_order, self.advance_order, self.cancel_order, self.edit_customer,
             self.delete_customer], weights=[10, 35, 30, 8, 12, 5])[0]
        with self.conn:
            action()
            self.audit(action.__name__)
        self.counts["transactions"] += 1


class MariaDbShop:
    """The MariaDB demo shop's share of the workload (sql/demo/mariadb_shop.sql): new customers,
    new orders, orders advancing, profile edits — so its pipeline streams live too."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.conn = stackctl.mariadb_connect(stackctl.MARIADB_DATABASE, autocommit=False)
        self.count = 0

    def step(self) -> None:
        r = self.rng
        with self.conn.cursor() as cur:
            choice = r.random()
            if choice < 0.2:
                cur.execute("INSERT INTO customers (email, full_name, country, vip, profile) VALUES (%s, %s, %s, %s, %s)",
                            (f"m{r.getrandbits(48):x}@example.com", f"{r.choice(FIRST)} {r.choice(LAST)}",
                             r.choice(COUNTRIES), r.random() < 0.1, json.dumps({"note": "größer ≥ 10 € 😀"})))
            elif choice < 0.6:
                cur.execute("INSERT INTO orders (customer_id, status, total, note, delivery_on) SELECT id, 'new', %s, "
                            "%s, CURRENT_DATE + INTERVAL %s DAY FROM customers ORDER BY RAND() LIMIT 1",
                            (Decimal(r.randint(99, 99999)) / 100, None if r.random() < 0.6 else "Bitte klingeln",
                             r.randint(1, 14)))
            elif choice < 0.9:
                cur.execute("UPDATE orders SET status = CASE status WHEN 'new' THEN 'paid' WHEN 'paid' THEN 'shipped' "
                            "ELSE status END WHERE id = (SELECT id FROM (SELECT id FROM orders ORDER BY RAND() LIMIT 1) o)")
            else:
                cur.execute("UPDATE customers SET vip = NOT vip WHERE id = "
                            "(SELECT id FROM (SELECT id FROM customers ORDER BY RAND() LIMIT 1) c)")
        self.conn.commit()
        self.count += 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", help="source database URL (default: the local stack's demo source)")
    ap.add_argument("--seed-customers", type=int, default=0, help="create the schema and insert this many customers")
    ap.add_argument("--seed-orders", type=int, default=0, help="... and this many orders with items")
    ap.add_argument("--rate", type=float, default=0, help="transactions per second to run (0 = none)")
    ap.add_argument("--duration", type=float, default=0, help="seconds to run (0 = until interrupted)")
    ap.add_argument("--seed", type=int, default=None, help="random seed for a repeatable workload")
    ap.add_argument("--mariadb-share", type=float, default=0.0,
                    help="also change the MariaDB demo shop in this share of the steps (0 = never)")
    args = ap.parse_args(argv)

    conn = connect(args.dsn)
    rng = random.Random(args.seed)
    work = Workload(conn, rng)
    load_schema(conn)  # idempotent: also adds tables a newer demo schema has
    if args.seed_customers or args.seed_orders:
        for _ in range(args.seed_customers):
            with conn:
                work.new_customer()
        for _ in range(args.seed_orders):
            with conn:
                work.new_order()
        print(f"[workload] seeded: {work.counts}", flush=True)
    if args.rate <= 0:
        return 0
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    started = last_report = time.monotonic()
    interval = 1.0 / args.rate
    next_at = started
    shop = MariaDbShop(rng) if args.mariadb_share > 0 else None
    try:
        while not stop["now"] and (not args.duration or time.monotonic() - started < args.duration):
            work.step()
            if shop is not None and rng.random() < args.mariadb_share:
                shop.step()
            next_at += interval
            time.sleep(max(0.0, next_at - time.monotonic()))
            if time.monotonic() - last_report >= 10:
                last_report = time.monotonic()
                print(f"[workload] {time.strftime('%T')} {work.counts}"
                      + (f", MariaDB shop: {shop.count} transactions" if shop else ""), flush=True)
    except KeyboardInterrupt:
        pass
    print(f"[workload] done: {work.counts}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
