"""Which catalog an `iceberg` connection names and what each client is given (targets.iceberg.catalog),
and where a pipeline's state lives (state.conn_id)."""
import pytest

from tideline.core.config import parse_pipeline
from tideline.core.connections import Conn
from tideline.core.errors import ConfigError
from tideline.targets.iceberg.catalog import catalog_settings, object_store

S3 = Conn("lake_s3", "aws", login="AKIA-test", password="s3cret", extra={
    "endpoint_url": "http://127.0.0.1:9000", "region_name": "eu-west-1",
    "config_kwargs": {"s3": {"addressing_style": "path"}, "request_checksum_calculation": "when_required"}})


def resolve(conn_id):
    assert conn_id == "lake_s3"
    return S3


def test_a_jdbc_catalog_is_the_default_and_its_database_can_hold_the_state():
    conn = Conn("lake", "iceberg", "db.example", 5432, "sync", "pw", "catalog", {"warehouse": "file:///w"})
    s = catalog_settings(conn)
    assert (s.type, s.holds_state, s.store) == ("jdbc", True, None)
    props = s.iceberg_properties()
    assert props["type"] == "jdbc" and props["uri"].startswith("jdbc:postgresql://db.example:5432/catalog")
    assert props["jdbc.password"] == "pw" and props["warehouse"] == "file:///w"
    assert s.pyiceberg_properties()["uri"].startswith("postgresql+psycopg2://sync:pw@db.example:5432/catalog")


def test_a_rest_catalog_on_s3_takes_its_store_from_the_aws_connection():
    conn = Conn("lake", "iceberg", "https://polaris.example/api/catalog", login="client", password="secret",
                extra={"catalog_type": "rest", "warehouse": "s3://bucket/wh", "aws_conn_id": "lake_s3",
                       "scope": "PRINCIPAL_ROLE:ALL", "properties": {"header.X-Iceberg-Access-Delegation": ""}})
    s = catalog_settings(conn, resolve)
    assert (s.type, s.holds_state, s.tested) == ("rest", False, True)
    props = s.iceberg_properties()
    assert props["type"] == "rest" and props["uri"] == "https://polaris.example/api/catalog"
    assert props["credential"] == "client:secret" and props["scope"] == "PRINCIPAL_ROLE:ALL"
    assert props["oauth2-server-uri"] == "https://polaris.example/api/catalog/v1/oauth/tokens"
    assert props["rest.auth.type"] == "oauth2"
    assert props["io-impl"] == "org.apache.iceberg.aws.s3.S3FileIO"
    assert props["s3.endpoint"] == "http://127.0.0.1:9000" and props["s3.path-style-access"] == "true"
    assert props["s3.access-key-id"] == "AKIA-test" and props["client.region"] == "eu-west-1"
    assert props["header.X-Iceberg-Access-Delegation"] == ""   # passed through
    py = s.pyiceberg_properties()
    assert py["s3.force-virtual-addressing"] == "false" and py["s3.region"] == "eu-west-1"
    assert s.store.arrow_options() == {"force_virtual_addressing": False, "endpoint_override": "127.0.0.1:9000",
                                       "scheme": "http", "region": "eu-west-1", "access_key": "AKIA-test",
                                       "secret_key": "s3cret"}
    assert s.store.environment() == {"AWS_REQUEST_CHECKSUM_CALCULATION": "WHEN_REQUIRED"}
    assert s.store.jvm_properties() == {"aws.requestChecksumCalculation": "WHEN_REQUIRED"}
    # what a waiting stream looks at besides the state database (IcebergTarget.probe)
    assert s.endpoints() == [("the REST catalog", "https://polaris.example/api/catalog"),
                             ("the object store", "http://127.0.0.1:9000")]


def test_a_bearer_token_and_no_aws_connection_leave_the_keys_to_the_environment():
    conn = Conn("lake", "iceberg", "catalog.example", 8181, schema="http",
                extra={"catalog_type": "rest", "warehouse": "s3://b/", "token": "tok"})
    s = catalog_settings(conn)
    props = s.iceberg_properties()
    assert props["uri"] == "http://catalog.example:8181" and props["token"] == "tok" and "credential" not in props
    assert props["io-impl"].endswith("S3FileIO") and "s3.access-key-id" not in props


def test_another_catalog_type_is_passed_through_and_a_wrong_one_is_named():
    glue = catalog_settings(Conn("lake", "iceberg", extra={"catalog_type": "glue", "warehouse": "s3://b/w"}))
    assert (glue.type, glue.tested, glue.iceberg_properties()["type"]) == ("glue", False, "glue")
    with pytest.raises(ConfigError, match="extra.catalog_type.*'restful'; one of jdbc, rest"):
        catalog_settings(Conn("lake", "iceberg", extra={"catalog_type": "restful"}))
    with pytest.raises(ConfigError, match="extra.warehouse.*missing"):
        catalog_settings(Conn("lake", "iceberg", "h", 5432, "u", "p", "db"))
    with pytest.raises(ConfigError, match="request_checksum_calculation.*one of when_supported"):
        object_store(Conn("s3", "aws", extra={"config_kwargs": {"request_checksum_calculation": "never"}}))


def _pipeline(**extra):
    return parse_pipeline({"name": "lake", "source": {"conn_id": "src"}, "kafka": {"topic_prefix": "t.lake"},
                           "target": {"kind": "iceberg", "catalog": "lake_rest", "namespace": "n"},
                           "tables": [{"name": "orders"}], **extra}, "lake.yaml")


def test_the_state_lives_where_state_conn_id_says_else_with_the_target():
    assert _pipeline().state_conn_id == "lake_rest"
    cfg = _pipeline(state={"conn_id": "lake_state"})
    assert cfg.state_conn_id == "lake_state" and "lake_state" in cfg.job_conn_ids


def test_a_rest_catalog_without_a_state_database_is_refused_naming_the_fix(monkeypatch):
    from tideline import targets
    conn = Conn("lake_rest", "iceberg", "http://127.0.0.1:8181", extra={"catalog_type": "rest", "warehouse": "s3://b/"})
    with pytest.raises(ConfigError, match=r"state.*names a rest catalog.*state: \{conn_id: \.\.\.\}"):
        targets.for_pipeline(_pipeline(), conn)
    state = Conn("lake_state", "postgres", "db", 5432, "u", "p", "state")
    store = targets.for_pipeline(_pipeline(state={"conn_id": "lake_state"}), conn, state)
    assert store.state_db.conn is state and "dbname='state'" in store.dsn()


def test_every_job_redacts_a_rest_catalogs_credential_beside_spark_s_own_words():
    import re

    from tideline.spark_session import driver_conf
    regex = re.compile(driver_conf({}, environ={})["spark.redaction.regex"])
    for key in ("spark.sql.catalog.lake.credential", "spark.sql.catalog.lake.token",
                "spark.sql.catalog.lake.s3.secret-access-key", "spark.sql.catalog.lake.jdbc.password"):
        assert regex.search(key), key
