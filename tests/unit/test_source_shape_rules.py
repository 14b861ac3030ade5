"""Which source shapes are carried and which refused, with the fix a person pastes (pure)."""
from tideline.core.source_shapes import Relation, quote, refusal


def rel(**facts) -> Relation:
    return Relation("public", "t", **facts)


def reason(r) -> str:
    return f"{r.reason} | {r.fix}" if r else ""


def test_ordinary_partitioned_partition_and_inheritance_child_tables_are_carried():
    assert refusal(rel(), "public", "t", "cdc") is None
    assert refusal(rel(relkind="p"), "public", "t", "cdc") is None
    assert refusal(rel(partition_root='public.root', partition_root_key=("public", "root")), "public", "t", "cdc") is None
    assert refusal(rel(inherits_from="public.parent"), "public", "t", "cdc") is None
    assert refusal(rel(replica_identity="f"), "public", "t", "cdc") is None
    assert refusal(rel(replica_identity="i", identity_index_has_key=True), "public", "t", "cdc") is None


def test_tables_whose_changes_never_reach_the_log_are_refused_with_the_fix():
    assert "SET LOGGED" in reason(refusal(rel(persistence="u"), "public", "t", "cdc"))
    assert "temporary" in reason(refusal(rel(persistence="t"), "public", "t", "cdc"))
    for kind, word in (("v", "view"), ("m", "materialized view"), ("f", "foreign table")):
        assert word in reason(refusal(rel(relkind=kind), "public", "t", "cdc"))
    assert "public.t_x" in reason(refusal(rel(relkind="p", unlogged_partitions="public.t_x"), "public", "t", "cdc"))
    assert "does not exist" in reason(refusal(None, "public", "t", "cdc"))


def test_batch_mode_reads_with_select_so_log_and_identity_do_not_matter():
    assert refusal(rel(persistence="u", has_primary_key=False), "public", "t", "batch") is None
    assert refusal(rel(relkind="v"), "public", "t", "batch") is not None   # still no rows of its own


def test_replica_identity_and_keys():
    assert "REPLICA IDENTITY DEFAULT" in reason(refusal(rel(replica_identity="n"), "public", "t", "cdc"))
    assert "ADD PRIMARY KEY" in reason(refusal(rel(has_primary_key=False, replica_identity="f"), "public", "t", "cdc"))
    assert "USING INDEX" in reason(refusal(rel(replica_identity="i", identity_index_has_key=False), "public", "t", "cdc"))


def test_a_partition_beside_its_root_and_an_inheritance_parent_are_refused():
    part = rel(partition_root="public.root", partition_root_key=("public", "root"))
    assert "published as the root's" in reason(refusal(part, "public", "t", "cdc", frozenset({("public", "root")})))
    assert "INHERITS" in reason(refusal(rel(inheritance_children="public.kid"), "public", "t", "cdc"))
    assert "PostgreSQL 13" in reason(refusal(rel(relkind="p", server_version=120005), "public", "t", "cdc"))


def test_names_in_messages_are_quoted_as_psql_needs_them():
    assert quote("orders") == "orders"
    assert quote("Order Lines") == '"Order Lines"'
    assert quote("Käufe") == '"Käufe"'
    assert quote('a"b') == '"a""b"'


def test_a_partition_tree_that_moved_rows_without_change_events_asks_for_a_reload():
    from tideline.core.source_shapes import partition_tree_change
    known = {"1": {"name": "public.t_eu", "created_as_partition": True},
             "2": {"name": "public.t_us", "created_as_partition": False}}   # attached before the load: in it
    assert partition_tree_change(known, dict(known)) is None
    created = {**known, "3": {"name": "public.t_jp", "created_as_partition": True}}
    assert partition_tree_change(known, created) is None                    # starts empty: events carry it
    attached = {**known, "4": {"name": "public.t_old", "created_as_partition": False}}
    assert "public.t_old attached" in partition_tree_change(known, attached)
    assert "public.t_us detached or dropped" in partition_tree_change(known, {"1": known["1"]})
