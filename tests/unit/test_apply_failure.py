"""What a refused change means and what a person reads about it (pure)."""
from tideline.core.apply_failure import FailedEvent, describe, is_deterministic, truncate


def ev(**kw):
    base = dict(table="orders", topic="p.public.orders", partition=1, offset=42, key='{"id": "7"}', op="u",
                column="qty", value="5000", sqlstate="23514", error="violates check constraint", constraint="qty_small")
    return FailedEvent(**{**base, **kw})


def test_only_refusals_of_the_data_are_narrowed_and_halted():
    assert all(is_deterministic(s) for s in ("22007", "23502", "23514", "23505", "42703", "54000", "P0001"))
    # connection loss, deadlock, serialization, admin shutdown, lock timeout: retried, never halted
    assert not any(is_deterministic(s) for s in ("08006", "40P01", "40001", "57P01", "55P03", None, ""))


def test_the_message_names_table_event_column_value_and_the_fix():
    text = describe("shop", ev())
    for part in ("shop.orders", "p.public.orders partition 1 offset 42", '{"id": "7"}', "column qty = '5000'",
                 "SQLSTATE 23514", "HALTED", "constraint qty_small", "trigger the sync DAG", "dead_letter"):
        assert part in text, part
    assert "change the target column's type" in describe("shop", ev(sqlstate="22003", constraint=None))
    assert "dead_letters" in describe("shop", ev(), dead_lettered=True)
    assert "HALTED" not in describe("shop", ev(), dead_lettered=True)


def test_long_values_are_truncated_with_their_length():
    assert truncate("x" * 500).endswith("… (500 chars)") and len(truncate("x" * 500)) < 230
    assert truncate("short") == "short" and truncate(None) is None
