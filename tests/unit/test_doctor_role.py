"""The doctor's judgement of the source role, pure: rights missing fail naming the GRANT, rights
beyond capture's warn, exactly what capture needs passes."""
from tideline.core.doctor_checks import FAIL, PASS, WARN, source_role

WANTED = ["public.orders", "shop.items"]
PUBLISHED = WANTED + ["public.tideline_heartbeat"]


def facts(**kw):
    tables = {n: {"table": n.split(".")[1], "select": True, "modify": [], "owner": False} for n in WANTED}
    for name, over in kw.pop("tables", {}).items():
        tables[name].update(over)
    return {"superuser": False, "replication": True, "tables": tables,
            "publication": {"exists": True, "complete": True}, **kw}


def test_exactly_what_capture_needs_passes():
    [check] = source_role("cdc", facts(), "tideline_p", WANTED, PUBLISHED)
    assert check.status == PASS and "nothing more" in check.detail


def test_each_missing_right_fails_with_its_grant_and_a_table_alone_for_its_select():
    checks = source_role("cdc", facts(replication=False, tables={"shop.items": {"select": False}},
                                      publication={"exists": False, "complete": False}), "tideline_p", WANTED,
                         PUBLISHED)
    fixes = {c.name: (c.status, c.fix, c.table) for c in checks}
    assert fixes["role"] == (FAIL, "ALTER ROLE cdc REPLICATION", None)
    assert fixes["privilege on shop.items"] == (FAIL, "GRANT SELECT ON shop.items TO cdc", "items")
    status, fix, _ = fixes["publication tideline_p"]
    assert status == FAIL and fix.startswith("as the tables' owner: CREATE PUBLICATION tideline_p FOR TABLE "
                                             "public.orders, shop.items, public.tideline_heartbeat WITH (")


def test_a_publication_it_can_repair_itself_is_no_failure_but_owning_the_tables_warns():
    checks = source_role("cdc", facts(publication={"exists": True, "complete": False},
                                      tables={n: {"owner": True} for n in WANTED}), "p", WANTED, PUBLISHED)
    assert [c.status for c in checks] == [WARN] and "owns (so may ALTER or DROP)" in checks[0].detail


def test_a_publication_the_dbas_delegate_keeps_is_no_failure_for_a_role_owning_nothing():
    [check] = source_role("cdc", facts(publication={"exists": False, "complete": False, "delegate": True}),
                          "tideline_p", WANTED, PUBLISHED)
    assert check.status == PASS
    [fail] = [c for c in source_role("cdc", facts(publication={"exists": False, "complete": False}), "tideline_p",
                                     WANTED, PUBLISHED) if c.status == FAIL]
    assert "sql/dba/postgres_source.sql" in fail.fix


def test_a_superuser_or_a_writer_is_more_than_needed():
    [su] = source_role("postgres", facts(superuser=True), "p", WANTED, PUBLISHED)
    assert su.status == WARN and "superuser" in su.detail
    [w] = source_role("cdc", facts(tables={"public.orders": {"modify": ["DELETE", "UPDATE"]}}), "p", WANTED, PUBLISHED)
    assert w.status == WARN and w.fix == "REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON public.orders FROM cdc"


def test_encryption_passes_verified_tls_and_loopback_and_warns_clear_or_unverified_traffic():
    from tideline.core.doctor_checks import encryption
    assert encryption("source", "src", ["db.internal"], "verify-full", True).status == "pass"
    assert encryption("kafka", "k", ["127.0.0.1"], "PLAINTEXT", False).status == "pass"
    clear = encryption("source", "src", ["db.internal"], "prefer", False)
    assert clear.status == "warn" and "verify-full" in clear.fix and "src" in clear.fix
    unverified = encryption("target", "tgt", ["db.internal"], "require", False)
    assert unverified.status == "warn" and "not verified" in unverified.detail
    kafka = encryption("kafka", "k", ["k1", "k2"], "PLAINTEXT", False)
    assert kafka.status == "warn" and "SASL_SSL" in kafka.fix
