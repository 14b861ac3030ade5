"""Which Iceberg catalog an Airflow connection names, and how each reader and writer reaches it and
its warehouse: Spark's catalog properties, PyIceberg's, pyarrow's file system for the data files
Tideline writes itself, and the AWS SDKs' checksum settings. It reads connections and opens nothing,
but probe_endpoints, which connects.

The `iceberg` connection (docs/iceberg.md):
- **jdbc** (the default): Iceberg's JDBC catalog in a PostgreSQL database — host, port, login,
  password and schema (the database) are that database's; `extra.warehouse` the tables' files.
- **rest**: a REST catalog (Polaris, Unity, Nessie, Lakekeeper, Gravitino, S3 Tables, the Iceberg
  reference server) — `host` its URI; login and password its OAuth2 client id and secret (the
  `credential`), or `extra.token` a bearer token; `extra.warehouse` the warehouse it serves.
- any other `extra.catalog_type` Iceberg names (glue, hive, nessie, hadoop), or `extra.catalog_impl`
  a catalog class: passed through (configured, not tested here).
`extra.properties` are passed to the catalog as they are, after Tideline's own (they win).

Object storage: an `s3://` (or `s3a://`) warehouse is read and written with Iceberg's S3FileIO, and
Tideline's own data files with pyarrow's S3 file system. Its endpoint, region and keys come from
the Airflow `aws` connection `extra.aws_conn_id` names (login and password the access key and
secret; extra `endpoint_url`, `region_name`, botocore's `config_kwargs` for path-style addressing
and the request checksums), or from the environment's AWS variables when none is named. They are
handed to the session at run time, never on a command line: Spark redacts them in its UI and logs.
"""
from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote, urlencode, urlsplit

from tideline.core.errors import ConfigError

CATALOG_TYPES = ("jdbc", "rest", "glue", "hive", "nessie", "hadoop")
TESTED = ("jdbc", "rest")
S3_SCHEMES = ("s3", "s3a")
S3_FILE_IO = "org.apache.iceberg.aws.s3.S3FileIO"
# The AWS SDKs' checksum settings (botocore's config names -> the SDKs' environment variables and
# the Java SDK's system properties): an S3-compatible store that does not take the SDKs' default
# trailing checksums (aws-chunked uploads) needs "when_required".
CHECKSUM_SETTINGS = {
    "request_checksum_calculation": ("AWS_REQUEST_CHECKSUM_CALCULATION", "aws.requestChecksumCalculation"),
    "response_checksum_validation": ("AWS_RESPONSE_CHECKSUM_VALIDATION", "aws.responseChecksumValidation"),
}


@dataclass(frozen=True)
class ObjectStore:
    """An S3 store as an `aws` connection describes it (None fields: the SDK's own defaults and chain)."""
    endpoint: str | None = None
    region: str | None = None
    access_key: str | None = None
    secret_key: str | None = None
    path_style: bool = False
    checksums: tuple[tuple[str, str], ...] = ()   # (botocore setting, value)

    def iceberg_properties(self) -> dict[str, str]:
        props = {"io-impl": S3_FILE_IO}
        if self.endpoint:
            props["s3.endpoint"] = self.endpoint
        if self.path_style:
            props["s3.path-style-access"] = "true"
        if self.region:
            props["client.region"] = self.region
        if self.access_key:
            props["s3.access-key-id"] = self.access_key
            props["s3.secret-access-key"] = self.secret_key or ""
        return props

    def pyiceberg_properties(self) -> dict[str, str]:
        props = {"py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO"}
        if self.endpoint:
            props["s3.endpoint"] = self.endpoint
        if self.region:
            props["s3.region"] = self.region
        if self.path_style:
            props["s3.force-virtual-addressing"] = "false"
        if self.access_key:
            props["s3.access-key-id"] = self.access_key
            props["s3.secret-access-key"] = self.secret_key or ""
        return props

    def arrow_options(self) -> dict:
        """pyarrow.fs.S3FileSystem's arguments."""
        opts: dict = {"force_virtual_addressing": False} if self.path_style else {}
        if self.endpoint:
            parts = urlsplit(self.endpoint)
            opts["endpoint_override"] = parts.netloc or parts.path
            opts["scheme"] = parts.scheme or "https"
        if self.region:
            opts["region"] = self.region
        if self.access_key:
            opts["access_key"], opts["secret_key"] = self.access_key, self.secret_key or ""
        return opts

    def environment(self) -> dict[str, str]:
        """The AWS SDKs' variables for the checksum settings (pyarrow's C++ SDK reads them)."""
        return {CHECKSUM_SETTINGS[k][0]: v.upper() for k, v in self.checksums}

    def jvm_properties(self) -> dict[str, str]:
        """The Java SDK's system properties for the same settings (read when a client is built)."""
        return {CHECKSUM_SETTINGS[k][1]: v.upper() for k, v in self.checksums}


def object_store(aws) -> ObjectStore:
    """The store an Airflow `aws` connection names (None: the environment's AWS settings)."""
    if aws is None:
        return ObjectStore()
    extra = aws.extra or {}
    config = extra.get("config_kwargs") or {}
    problems = [(f"extra.config_kwargs.{k}", f"is {config[k]!r}; one of when_supported, when_required")
                for k in CHECKSUM_SETTINGS if k in config and str(config[k]).lower() not in ("when_supported",
                                                                                              "when_required")]
    if problems:
        raise ConfigError(f"connection {aws.conn_id}", problems)
    style = ((config.get("s3") or {}).get("addressing_style") or "").lower()
    endpoint = extra.get("endpoint_url") or (f"{aws.schema or 'https'}://{aws.host}" + (f":{aws.port}" if aws.port else "")
                                             if aws.host else None)
    return ObjectStore(endpoint=endpoint, region=extra.get("region_name"), access_key=aws.login or None,
                       secret_key=aws.password or None, path_style=style == "path",
                       checksums=tuple((k, str(config[k]).lower()) for k in CHECKSUM_SETTINGS if k in config))


@dataclass(frozen=True)
class CatalogSettings:
    """One Iceberg catalog connection, read: its type, warehouse, and the object store of its files."""
    name: str             # the catalog's name in Spark SQL: the connection id
    type: str             # jdbc, rest, another Iceberg catalog type, or "custom" (catalog_impl)
    warehouse: str | None
    conn: object
    store: ObjectStore | None   # set for an s3:// warehouse
    passthrough: tuple[tuple[str, str], ...] = ()

    @property
    def tested(self) -> bool:
        return self.type in TESTED

    @property
    def holds_state(self) -> bool:
        """Its own database can hold Tideline's state (a JDBC catalog in PostgreSQL)."""
        return self.type == "jdbc"

    def iceberg_properties(self) -> dict[str, str]:
        """The catalog's Iceberg properties (Spark's spark.sql.catalog.<name>.*, Iceberg's Java API)."""
        c = self.conn
        if self.type == "jdbc":
            props = {"type": "jdbc", "uri": c.jdbc_url(), "jdbc.user": c.login or "", "jdbc.password": c.password or "",
                     "jdbc.schema-version": "V1",
                     # a pooled connection the catalog database ended (a restart: admin/crash shutdown) is
                     # replaced and the call retried; Iceberg retries only the 08xxx states by itself
                     "retryable_status_codes": "57P01,57P02,57P03"}
        elif self.type == "rest":
            props = {"type": "rest", "uri": rest_uri(c), **rest_auth(c)}
            if "credential" in props:   # said, not inferred (Iceberg's Java client warns it will stop inferring)
                props["rest.auth.type"] = "oauth2"
        elif self.type == "custom":
            props = {"catalog-impl": c.extra["catalog_impl"]}
            if c.host:
                props["uri"] = c.host
        else:
            props = {"type": self.type}
            if c.host:
                props["uri"] = c.host
        if self.warehouse:
            props["warehouse"] = self.warehouse
        if self.store is not None:
            props.update(self.store.iceberg_properties())
        props.update(dict(self.passthrough))
        return props

    def endpoints(self) -> list[tuple[str, str]]:
        """(what, URL) of the services the catalog's clients call besides its database: a REST
        catalog's URI, an object store's endpoint."""
        out = [("the REST catalog", rest_uri(self.conn))] if self.type == "rest" else []
        if self.store is not None and self.store.endpoint:
            out.append(("the object store", self.store.endpoint))
        return out

    def pyiceberg_properties(self) -> dict[str, str]:
        """PyIceberg's load_catalog properties for the same catalog."""
        c = self.conn
        if self.type == "jdbc":
            uri = (f"postgresql+psycopg2://{quote(c.login or '', safe='')}:{quote(c.password or '', safe='')}@"
                   f"{c.host or 'localhost'}:{c.port or 5432}/{c.schema}" + (f"?{urlencode(c.tls)}" if c.tls else ""))
            # pool_pre_ping: a pooled connection the catalog database dropped (a restart) is replaced, not used
            props = {"type": "sql", "uri": uri, "pool_pre_ping": "true"}
        elif self.type == "rest":
            props = {"type": "rest", "uri": rest_uri(c), **rest_auth(c)}
        elif self.type == "custom":
            props = {"py-catalog-impl": c.extra.get("py_catalog_impl", "")}
        else:
            props = {"type": self.type, **({"uri": c.host} if c.host else {})}
        if self.warehouse:
            props["warehouse"] = self.warehouse
        if self.store is not None:
            props.update(self.store.pyiceberg_properties())
        props.update(dict(self.passthrough))
        return props


def rest_uri(c) -> str:
    if not c.host:
        raise ConfigError(f"connection {c.conn_id}", [("host", "is missing: the REST catalog's URI "
                                                               "(https://catalog.example.com/api/catalog)")])
    host = c.host if "://" in c.host else f"{c.schema or 'https'}://{c.host}"
    parts = urlsplit(host)
    if c.port and not parts.port:
        host = f"{parts.scheme}://{parts.netloc}:{c.port}{parts.path}"
    return host.rstrip("/")


def rest_auth(c) -> dict[str, str]:
    """OAuth2 client credentials (login:password) or a bearer token (extra.token), else none."""
    extra = c.extra or {}
    if extra.get("token"):
        return {"token": str(extra["token"])}
    if c.login:
        auth = {"credential": f"{c.login}:{c.password or ''}"}
        if extra.get("scope"):
            auth["scope"] = str(extra["scope"])
        # the token endpoint: the connection's, else the REST spec's own under the catalog's URI (where
        # Iceberg's clients look today, a fallback they will drop: apache/iceberg#10537)
        auth["oauth2-server-uri"] = str(extra.get("oauth2_server_uri") or f"{rest_uri(c)}/v1/oauth/tokens")
        return auth
    return {}


def probe_endpoints(settings: CatalogSettings, timeout_s: float) -> None:
    """A TCP connect to each of the catalog's endpoints; a TargetError names every one that does not
    answer (the only function here that opens anything)."""
    import socket

    from tideline.core.errors import TargetError
    away = []
    for what, url in settings.endpoints():
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            socket.create_connection((parts.hostname, port), timeout=timeout_s).close()
        except OSError as exc:
            away.append(f"{what} at {url} does not answer ({exc.strerror or exc})")
    if away:
        raise TargetError("; ".join(away))


def catalog_type(conn) -> str:
    """The type of catalog a connection names, as written (catalog_settings checks it)."""
    extra = conn.extra or {}
    return "custom" if extra.get("catalog_impl") else str(extra.get("catalog_type") or "jdbc").lower()


def state_refusal(conn) -> str | None:
    """Why an Iceberg connection cannot hold Tideline's state (TargetSpec.state_refusal): only a
    JDBC catalog has a PostgreSQL database to hold it."""
    kind = catalog_type(conn)
    if kind == "jdbc":
        return None
    return (f"the Iceberg connection {conn.conn_id} names a {kind} catalog, which has no database to hold "
            f"Tideline's state (only a JDBC catalog in PostgreSQL has)")


def catalog_settings(conn, resolve=None) -> CatalogSettings:
    """The catalog an `iceberg` connection names; `resolve` (conn id -> Conn) finds its aws connection.
    A ConfigError names the connection, the field and what it may be."""
    extra = conn.extra or {}
    problems = []
    kind = catalog_type(conn)
    if kind != "custom":
        if kind not in CATALOG_TYPES:
            problems.append(("extra.catalog_type", f"is {kind!r}; one of {', '.join(CATALOG_TYPES)} (or "
                                                   f"extra.catalog_impl: a catalog class)"))
    warehouse = extra.get("warehouse")
    if not warehouse and kind == "jdbc":
        problems.append(("extra.warehouse", "is missing: where the Iceberg tables' files go (file:///… or s3://…)"))
    passthrough = extra.get("properties") or {}
    if not isinstance(passthrough, dict):
        problems.append(("extra.properties", "must be a mapping of Iceberg catalog properties"))
        passthrough = {}
    if problems:
        raise ConfigError(f"connection {conn.conn_id}", problems)
    scheme = urlsplit(warehouse).scheme if warehouse else ""
    store = None
    if scheme in S3_SCHEMES or extra.get("aws_conn_id"):
        aws = None
        if extra.get("aws_conn_id"):
            if resolve is None:
                from tideline.core.connections import get_connection as resolve
            aws = resolve(extra["aws_conn_id"])
        store = object_store(aws)
    return CatalogSettings(conn.conn_id, kind, warehouse, conn, store,
                           tuple((str(k), str(v)) for k, v in passthrough.items()))
